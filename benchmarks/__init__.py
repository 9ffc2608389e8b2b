"""aisched's benchmarks: each runs the operator's own code against baselines in the same run.

`python -m benchmarks.<name> --help` (from the repository root) says what each takes. Inputs
are arguments whose defaults are the public data beside the repository (../shared/data);
figures are printed, written to `--output` when given, and into benchmarks/results/ (the
committed figures) only with `--update-results`. `python -m benchmarks.run_all` (`make bench`)
runs them all. The simulations themselves live in aisched.sim, and the local-cluster driver
of the end-to-end benchmark in aisched.testing.
"""
