"""Forecast mode for an interruptible job: the chunks with the least forecast emissions."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from aisched.policy.carbon.forecast import EPS_S
from aisched.policy.carbon.offsets import OffsetJob
from aisched.policy.carbon.slots import Slots, chunks_from_selection, trim_to_work


def cleanest_chunks(job: OffsetJob, min_chunk: float) -> tuple[list[tuple[float, float]], float] | None:
    """Chunks on the forecast's step grid with the least forecast emissions (a DP).

    State per slot: how many slots are chosen so far (j), and whether a chunk is open and
    how many more slots it needs to reach `min_chunk`. Each chunk after the first is
    charged its overhead at the window's mean intensity, which steers the DP to fewer
    chunks; the exact work and cost of the best selection for each j is then checked
    (overhead steals time from a chunk), and the cheapest that does the work wins.
    The DP counts skipped slots instead of chosen ones when there are fewer of those
    (long jobs with little slack), so it costs O(slots * min(chosen, skipped)).
    """
    fc = job.forecast
    overhead = job.overhead
    end = min(job.end_bound, fc.total_seconds)
    slots = Slots.between(fc, job.now, end)
    n = len(slots.costs)
    step = fc.step_seconds
    j_min = max(1, math.ceil(job.work / step - EPS_S))
    if j_min > n:
        return None
    j_max = min(n, j_min + 1 + math.ceil((8 * overhead + job.first_later) / step))
    lengths = slots.lengths
    need = _slots_needed(lengths, min_chunk)
    choose: Callable[[int], list[int] | None]
    if overhead <= 0 and job.first_later <= 0 and all(k == 1 for k in need[1:]):
        # Free splits and no minimum to keep: the j cheapest slots are the DP's answer.
        order = sorted(range(n), key=slots.costs.__getitem__)
        choose = partial(_cheapest_slots, order, slots.costs, need[0])
    else:
        mean_intensity = sum(slots.costs) / max(EPS_S, sum(lengths))
        count_skips = n - j_min < j_max
        table = _chunk_dp(
            slots.costs,
            need,
            n - j_min if count_skips else j_max,
            overhead * mean_intensity,
            count_skips=count_skips,
        )
        choose = partial(_backtrack, table) if not count_skips else lambda j: _backtrack(table, n - j)
    best: tuple[list[tuple[float, float]], float] | None = None
    for j in range(j_min, j_max + 1):
        selected = choose(j)
        if selected is None:
            continue
        trimmed = trim_to_work(chunks_from_selection(slots, selected), job)
        if trimmed is None or trimmed[-1][1] > end + EPS_S:
            continue
        cost = sum(fc.cumulative(b) - fc.cumulative(a) for a, b in trimmed)
        if best is None or cost < best[1] - 1e-9 * max(1.0, cost):
            best = (trimmed, cost)
    return best


def _cheapest_slots(order: Sequence[int], costs: Sequence[float], head: int, j: int) -> list[int] | None:
    """The j cheapest slots; a first (partial) slot shorter than the minimum chunk comes
    only with the `head` slots that make it long enough, so try it with and without them."""
    if head == 1:
        return list(order[:j])
    without = [k for k in order if k != 0][:j]
    forced = list(range(head))
    with_head = forced + [k for k in order if k >= head][: j - head] if j >= head else None
    options = [o for o in (without, with_head) if o is not None and len(o) == j]
    return min(options, key=lambda o: sum(costs[k] for k in o)) if options else None


def _slots_needed(lengths: Sequence[float], min_chunk: float) -> list[int]:
    """need[i]: consecutive slots from i that add up to min_chunk; all the rest if they cannot.

    A chunk that cannot reach min_chunk before the horizon runs to the horizon, so it is
    the last chunk, the one allowed to be short.
    """
    n = len(lengths)
    need = []
    for i in range(n):
        total, k = 0.0, 0
        while i + k < n and total < min_chunk - EPS_S:
            total += lengths[i + k]
            k += 1
        need.append(max(1, k))
    return need


# DP states: before any chunk, between chunks, or 2 + s: in a chunk that needs s more slots.
_NOT_STARTED, _BETWEEN, _MAY_END = 0, 1, 2
# Where skipping a slot leads; an open chunk still short of min_chunk cannot stop.
_SKIP_TO = {_NOT_STARTED: _NOT_STARTED, _BETWEEN: _BETWEEN, _MAY_END: _BETWEEN}


@dataclass(frozen=True)
class _ChunkTable:
    """The DP's final costs per (state, count) and, per slot, each state's parent (state*2 + took)."""

    final: list[list[float]]
    parents: list[list[list[int]]]
    count_skips: bool


def _chunk_dp(
    costs: Sequence[float], need: Sequence[int], limit: int, chunk_penalty: float, *, count_skips: bool
) -> _ChunkTable:
    """Forward DP over slots; `count` is chosen slots, or skipped ones if count_skips."""
    n_states = 2 + max(need)
    inf = math.inf
    # Equal-cost selections (a flat clean window) differ in when the work is done: a cost that
    # grows with the slot's index, far below any real difference, makes the DP take the earlier
    # slots, so a job runs to the end of the clean window it is in rather than pausing early.
    later_bias = 1e-9 * max((abs(c) for c in costs), default=0.0) / max(1, len(costs))
    cost = [[inf] * (limit + 1) for _ in range(n_states)]
    cost[_NOT_STARTED][0] = 0.0
    take_adds, skip_adds = (0, 1) if count_skips else (1, 0)
    parents: list[list[list[int]]] = []
    for k, slot_cost in enumerate(costs):
        new = [[inf] * (limit + 1) for _ in range(n_states)]
        par = [[-1] * (limit + 1) for _ in range(n_states)]
        for state in range(n_states):
            row = cost[state]
            skip_to = _SKIP_TO.get(state, -1)
            take_to = 2 + max(0, state - 3) if state >= _MAY_END else 2 + need[k] - 1
            extra = slot_cost + k * later_bias + (chunk_penalty if state == _BETWEEN else 0.0)
            new_take, par_take = new[take_to], par[take_to]
            for c in range(limit + 1):
                value = row[c]
                if value == inf:
                    continue
                if skip_to >= 0 and c + skip_adds <= limit and value < new[skip_to][c + skip_adds]:
                    new[skip_to][c + skip_adds] = value
                    par[skip_to][c + skip_adds] = state * 2
                if c + take_adds <= limit and value + extra < new_take[c + take_adds]:
                    new_take[c + take_adds] = value + extra
                    par_take[c + take_adds] = state * 2 + 1
        cost = new
        parents.append(par)
    return _ChunkTable(cost, parents, count_skips)


def _backtrack(table: _ChunkTable, count: int) -> list[int] | None:
    """The slots chosen by the cheapest path that ends with this count, if any."""
    if not 0 <= count < len(table.final[0]):
        return None
    value, state = min((row[count], state) for state, row in enumerate(table.final) if state != _NOT_STARTED)
    if value == math.inf:
        return None
    selected = []
    for k in range(len(table.parents) - 1, -1, -1):
        state, took = divmod(table.parents[k][state][count], 2)
        if took:
            selected.append(k)
        if took != table.count_skips:
            count -= 1
    return selected
