"""Drivers for tests and benchmarks that run aisched for real, as kopf.testing is for kopf.

`cluster` starts and steers the local GPU cluster (hack/cluster.sh), `operator` runs
`aisched run` as a process against it, and `nodes` renders a cluster description into the
fake GPU Nodes that cluster is made of. They drive scripts of the repository (hack/), so
they work from a checkout (an editable install), not from an installed wheel.

Importing this package imports nothing: `nodes` runs under a bare python3 with PyYAML
(hack/cluster.sh falls back to one), while `cluster` needs the Kubernetes client.
"""
