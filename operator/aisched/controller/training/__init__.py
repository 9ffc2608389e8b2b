"""The TrainingJob controller, one module per concern.

state (caches, clients, work queue) < isolation (one job's failure is its own)
< reconcile (one job) < carbon, reporting
< scheduling (the cycle) < loop (the controller the watch handlers feed).
"""

from aisched.controller.training.loop import TrainingJobController

__all__ = ["TrainingJobController"]
