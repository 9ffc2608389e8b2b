"""Trace-driven simulator: runs the policy code on a simulated cluster and clock."""
