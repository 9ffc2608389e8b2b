"""GPU sharing: fractions of GPUs packed against fragmentation (issue 29). Pure: no clock, no I/O."""
