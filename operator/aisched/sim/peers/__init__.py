"""Today's schedulers as the simulator's peers, each reimplemented from its documentation or paper.

Every module says what it models, what it does not, and the document it follows. They run on the
same `ClusterSnapshot`, the same jobs and the same speed model as aisched; none is told durations.
"""
