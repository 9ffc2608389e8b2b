"""Kubernetes I/O: the inventory fed by watches, and builders of the objects the operator writes."""
