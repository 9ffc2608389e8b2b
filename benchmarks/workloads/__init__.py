"""The `workloads` benchmark: plain Indexed Jobs through aisched, Kueue with TAS and kube-scheduler alone.

`python -m benchmarks.workloads --help`; the run is benchmarks/workloads/bench.py, what it submits and
installs is objects.py (pure), and Kueue's out-of-cluster run is kueue.py.
"""
