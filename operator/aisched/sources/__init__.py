"""Outside data the operator reads over HTTP: carbon intensity forecasts, Prometheus metrics."""
