"""Spot simulation: cost, deadline misses and lost work of capacity policies on real spot traces.

Each trace (aisched.sim.spot.traces) says, every `metadata.gap_seconds`, whether a job
could get its spot instances in one zone. Jobs of several lengths and deadlines start at
evenly spaced points of each trace, and every policy runs the same jobs
(aisched.sim.spot.scenario):

- aisched: aisched.policy.spot.choose_capacity (policy Prefer), with the checkpoint
  interval of spot_checkpoint_interval: Young/Daly for the pool's interruption rate
  as estimated (aisched.policy.interruptions) from the trace before each (re)start,
  thinned by the notice saves the job has seen land, and capped by its slack.
- on_demand: always on-demand; the baseline every cost is divided by.
- greedy_spot: spot whenever there is some, otherwise wait, and on-demand for good
  once the deadline leaves no more room to wait.
- uniform_progress: our reimplementation of the paper's Uniform Progress, from its
  description (see UniformProgress).

The baselines checkpoint at a fixed interval. The traces do not say whether a notice came
in time, so the results hold both cases: with the SIGTERM checkpoint of aisched.workload
landing in the notice, and with every notice save failing (`without_notice_checkpoint`).
Every spot policy here counts only saved work as safe when it judges the deadline, so each
knows what an interruption can cost. cost_vs_on_demand divides by the cost of the
on_demand policy.

`aisched simulate spot TRACE...` runs it; benchmarks/spot.py runs it on the public traces.
"""
