from __future__ import annotations

from aisched.kube.versions import VersionLedger, is_newer


def test_versions_compare_as_integers_only_when_both_are() -> None:
    assert is_newer("10", "9")  # not as strings, where "10" < "9"
    assert not is_newer("9", "10")
    assert not is_newer("7", "7")
    assert not is_newer("abc", "1") and not is_newer("1", "abc")
    assert not is_newer("5", "") and not is_newer(None, "5")


def test_a_copy_older_than_the_held_one_or_than_the_deletion_is_stale() -> None:
    ledger: VersionLedger[str] = VersionLedger()
    assert not ledger.is_stale("a", "5")
    ledger.saw("a", "5")
    assert ledger.is_stale("a", "4") and not ledger.is_stale("a", "6")
    ledger.deleted("a", "8")
    assert ledger.is_stale("a", "7")  # the listed copy from before the deletion
    assert not ledger.is_stale("a", "9")  # created again after it


def test_a_relist_forgets_deletions_it_already_reflects() -> None:
    ledger: VersionLedger[str] = VersionLedger()
    ledger.deleted("old", "3")
    ledger.deleted("new", "12")
    ledger.begin_relist("10")
    assert ledger.tombstones == {"new": "12"}


def test_absent_means_left_out_and_last_seen_no_later_than_the_list() -> None:
    ledger: VersionLedger[str] = VersionLedger()
    for key, version in (("listed", "4"), ("gone", "6"), ("at-list", "10"), ("after", "11"), ("opaque", "x")):
        ledger.saw(key, version)
    assert sorted(ledger.absent(["listed"], "10")) == ["at-list", "gone", "opaque"]
