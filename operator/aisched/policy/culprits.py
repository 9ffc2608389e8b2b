"""Which of a batch's members a failing computation cannot take, found by halving the batch.

The scheduling cycle decides for every job at once; should the decision raise, the jobs it
raises on are set aside and it decides for the others. Trying each job alone costs one full
decision per job (thousands, on a backlog, while nothing else runs) and misses a failure that
needs two jobs together (a running gang and a waiting one). Halving costs a few decisions per
culprit and finds such pairs: when neither half fails alone, one half is kept in while the
other is halved, so the member that fails beside it is found.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

Item = TypeVar("Item")


def culprits(
    fixed: Sequence[Item], candidates: Sequence[Item], fails: Callable[[Sequence[Item]], Exception | None]
) -> list[tuple[Item, Exception]]:
    """Members of CANDIDATES without which FAILS stops failing, each with the error it caused.

    FAILS is tried on FIXED plus some of CANDIDATES, and returns what it raised (None when it did
    not). FIXED is assumed to pass alone (check first). Every culprit returned fails beside FIXED
    and the candidates kept in with it; setting the returned ones aside breaks every failure found.
    A failure no subset shows (one that needs all of the candidates) yields no culprit.
    """
    found: list[tuple[Item, Exception]] = []
    _halve(list(fixed), list(candidates), fails, found)
    return found


def _halve(
    fixed: list[Item],
    candidates: list[Item],
    fails: Callable[[Sequence[Item]], Exception | None],
    found: list[tuple[Item, Exception]],
) -> None:
    if not candidates:
        return
    error = fails(fixed + candidates)
    if error is None:
        return
    if len(candidates) == 1:
        found.append((candidates[0], error))
        return
    middle = len(candidates) // 2
    first, second = candidates[:middle], candidates[middle:]
    before = len(found)
    _halve(fixed, first, fails, found)
    _halve(fixed, second, fails, found)
    if len(found) > before:
        return
    # Neither half fails alone: the failure needs members of both. Keep the first in, and halve
    # the second for the one that fails beside it.
    _halve(fixed + first, second, fails, found)
