"""Today's schedulers as the simulator's peers, each reimplemented from its documentation or paper.

Every module says what it models, what it does not, and the document it follows. They run on the
same `ClusterSnapshot`, the same jobs and the same speed model as aisched; none is told durations.

None of them resizes a job: a job the simulation makes elastic (`aisched.sim.jobs`) runs under
them at the size it asked for, from start to end. Kueue admits a workload's pod sets at their
count (partial admission, for jobs that opt in, only lowers it at admission; a running job's size
changes, where Kueue allows it, when its owner changes it, not on Kueue's initiative), Volcano
gangs have a fixed `minAvailable`, and Tiresias schedules jobs of fixed GPU demand. Growing
running jobs into idle GPUs is what only aisched does here.
"""
