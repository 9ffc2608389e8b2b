"""aisched: a Kubernetes operator that schedules AI training and inference on GPU clusters."""

# The one version source: pyproject reads it, and `make verify` checks the chart's appVersion against it.
__version__ = "0.1.0"
