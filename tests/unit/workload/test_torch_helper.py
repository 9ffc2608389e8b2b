"""The optional PyTorch helper: torch stays optional, checkpoints are found by step."""

from __future__ import annotations

from pathlib import Path

import pytest

from aisched.workload import ResumePoint
from aisched.workload.torch import checkpoint_path, latest_checkpoint, load_latest, save_state


def test_latest_checkpoint_is_the_highest_step_not_the_newest_file(tmp_path: Path) -> None:
    for step in (900, 12000, 50):
        Path(checkpoint_path(str(tmp_path), step)).write_bytes(b"")
    (tmp_path / "step-000099999.pt.partial").write_bytes(b"")  # a save cut short
    (tmp_path / "notes.txt").write_text("")
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "step-000012000.pt")


def test_no_checkpoint_in_a_missing_or_empty_directory(tmp_path: Path) -> None:
    assert latest_checkpoint(str(tmp_path / "missing")) is None
    assert latest_checkpoint(str(tmp_path)) is None


def test_a_fresh_start_restores_nothing(tmp_path: Path) -> None:
    assert load_latest(None, None, str(tmp_path), resume=None) is None


def test_without_a_directory_it_says_which_variable_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AISCHED_CHECKPOINT_DIR", raising=False)
    with pytest.raises(ValueError, match="AISCHED_CHECKPOINT_DIR"):
        save_state(None, None, 1)


def test_model_and_optimizer_round_trip(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = save_state(model, optimizer, 7, str(tmp_path))

    restored = torch.nn.Linear(3, 2)
    restored_optimizer = torch.optim.Adam(restored.parameters(), lr=0.1)
    assert load_latest(restored, restored_optimizer, resume=ResumePoint(7, path)) == 7
    assert torch.equal(restored.weight, model.weight)
    assert restored_optimizer.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]
