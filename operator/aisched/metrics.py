"""Every Prometheus metric aisched exports, defined in one place (filled in by the observability work)."""
