"""Carbon-aware deferral simulation: aisched's planner against "Let's Wait Awhile" on grid data.

Inputs: a grid's carbon intensity (a CSV of past readings, every `--step-minutes`; finer
readings are thinned to that step, as the paper did), and a job mix (aisched.sim.carbon.jobs):

- `philly`: jobs sampled (seeded, without replacement) from the Philly trace, keeping each
  job's duration, GPU count, weekday and time of day of submission. Jobs shorter than a
  minute (failed launches) are left out. Each job is put in a week of the carbon year drawn
  uniformly at random (among the weeks where its run and its deadline fit in the data), on
  the same weekday and time of day, rounded down to the half hour (the data's resolution;
  the paper's jobs also arrive on half hours). Philly's times are taken as UTC wall-clock
  times, like the carbon data.
- `paper`: the paper's ML jobs regenerated from its description (durations uniform over
  4-90 h in half hours, one GPU, submitted uniformly over the workdays of the year between
  09:00 and 17:00), to check the reimplementation against its figures.

Deadlines (aisched.sim.carbon.grid):
- "12h": finish at most 12 hours later than starting at once would (arrival + duration + 12 h).
- "next_workday", the paper's definition as its repository's simulator applies it: a job
  whose immediate run would end on a workday between 09:00 and 17:00 must end then (it
  is awaited); one that would end earlier in the morning may end at 09:00; one that
  would end in an evening may end at 09:00 the next day (so Saturday 09:00 after a
  Friday evening), and one ending at a weekend at 09:00 on Monday.

Forecast error, the paper's model: the forecast of every half hour is the actual value
plus Gaussian noise with a standard deviation of `error` times the year's mean intensity,
drawn once per run (`--seeds` runs, averaged); the half hour a decision is made in is
known exactly. Both strategies see the same noisy forecast.

Strategies (aisched.sim.carbon.strategies; a job draws the same power while it runs,
whatever the strategy):
- immediate: start at arrival (the baseline every saving is measured against);
- lets_wait_awhile, reimplemented from the paper: at arrival, with whole half-hour steps
  (n = ceil(duration / 30 min)) and a forecast up to the deadline, a job that cannot be
  interrupted starts at the step whose next n steps have the lowest mean forecast; one
  that can be interrupted runs in the n steps with the lowest forecast. Decided once.
- aisched: aisched.policy.carbon.plan_start, exact in continuous time (a run may start
  so that it ends on a step boundary, and the last piece of a split run is priced for
  the time it really runs), told the forecast's error (`forecast_error`, so it shrinks
  forecast extremes by their noise share). It re-plans when the planned start arrives,
  as the operator does on every resync, with the newer forecast (that half hour's
  actual value); an interruptible job re-plans at each chunk's start and end with the
  work still left. `--no-replan` and `--no-shrink` switch those off (ablations).
  With `--resume-overhead-minutes` each resumed chunk first spends that long
  restoring a checkpoint (drawing power, doing no work) for both strategies; aisched
  plans for it, Let's Wait Awhile (which has no such notion) runs over when its steps
  are not enough.

Savings (aisched.sim.carbon.cases) are fractions of the emissions of running every job at
once, weighted by energy (GPUs x duration), so long multi-GPU jobs count for what they
emit; `mean_job_saving` is the unweighted mean over jobs and `by_duration` splits the
weighted saving by job length. Deadline misses count job runs that ended after their
deadline, over all seeds.

`aisched simulate carbon --carbon CSV --trace PHILLY` runs it; benchmarks/carbon.py runs it
on the public GB data and compares with the paper's figures for GB.
"""
