"""aisched's Grafana dashboards as code; `aisched dashboards --output-dir DIR` writes one JSON file per dashboard.

The chart ships the files (helm/aisched/dashboards, written by `make generate`) as ConfigMaps
for Grafana's dashboard sidecar. Queries aggregate with `max by (...)` before summing gauges:
only the leader reports cluster state, but both replicas' series are in range around a
failover. Per-job GPU panels read the recording rules of the chart's PrometheusRule
(aisched_job:dcgm_*), which need NVIDIA's DCGM exporter.
"""
