"""Simulators that run aisched's policy code on a simulated clock, each beside the baselines it is judged by.

- the trace simulator (engine, policies, traces, clusters, report; `aisched simulate trace`):
  GPU job traces replayed on a simulated cluster, placement and queueing as the operator does them;
- `aisched.sim.spot` (`aisched simulate spot`): capacity choices and checkpoints on spot traces;
- `aisched.sim.carbon` (`aisched simulate carbon`): carbon-aware deferral on grid data;
- `aisched.sim.autoscale` (`aisched simulate autoscale`): replica counts on a bursty request trace.

They import only aisched.policy and aisched.api: what they read beyond that (a carbon CSV
through aisched.sources, the operator's settings as defaults) the command line passes in.
"""
