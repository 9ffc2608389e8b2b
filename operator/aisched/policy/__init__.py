"""Pure decision code: placement, queueing, spot, carbon, autoscaling. Time is passed in; no I/O."""
