"""The TrainingJob controller, built from parts that own their state and are handed to each other.

store (the jobs and Queues, parsed once per object) and writer (the one status writer) are
read by every part; guard (isolation.py: one job's failure is its own), releases, reconcile
(one job), carbon, reporting, capacity and decisions are put together by the scheduling cycle
(scheduling.py) and the loop (loop.py), which the watch handlers feed. No part inherits another.
"""

from aisched.controller.training.loop import TrainingJobController

__all__ = ["TrainingJobController"]
