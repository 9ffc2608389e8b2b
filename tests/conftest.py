"""Settings every tier shares.

Property tests explore at random on a developer's machine (a new counterexample is a
finding), but CI must pass or fail on the code alone: there (CI is set) Hypothesis runs
derandomized, every example derived from the test itself. Counterexamples that found
bugs stay in the tests as explicit `@example`s, so they run everywhere.
HYPOTHESIS_PROFILE=ci|dev chooses explicitly.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import Generator, Iterator

import pytest
from hypothesis import settings

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(autouse=True)
def _no_leaked_event_loop() -> Iterator[None]:
    """Close an idle event loop a test left set as current, before the garbage collector warns about it.

    pytest-asyncio leaves the loop it made for an async test current (its issue #724), and
    warnings are errors here: the ResourceWarning would fail whichever test runs at collection.
    looptime's plugin also asks the policy for a loop before every test, sync ones included,
    which makes one that a test's own `asyncio.run` then unsets without closing: the loop set
    here is the one it gets, and is closed below whoever unset it.
    """
    ours = asyncio.new_event_loop()
    asyncio.set_event_loop(ours)
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            loop = ours
    for stray in {loop, ours}:
        if not stray.is_running() and not stray.is_closed():
            stray.close()
    asyncio.set_event_loop(None)


# The tests that need torch, Lightning or Transformers skip where they are not installed (a plain
# `make venv`); `make test` installs them (`make frameworks`), so in CI such a skip means the
# frameworks went missing, and the tests that check the workers' side of the contract never ran.
FRAMEWORK_SKIPS = ("torch is not installed", "lightning is not installed", "transformers is not installed", "'torch'")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if os.environ.get("CI") and report.skipped and any(skip in str(report.longrepr) for skip in FRAMEWORK_SKIPS):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where `make test` installs the frameworks: {report.longrepr}"
    return report
