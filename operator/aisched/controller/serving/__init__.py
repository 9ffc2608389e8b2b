"""The InferenceService controller, split by concern.

- controller.py: the watch-fed caches, the loop on the shared work queue and a pass's order;
- replica_pods.py: the replica pods as this controller knows them (watch plus its own writes);
- placement.py: pods that ended go, a rollout step and new replicas placed;
- autoscaling.py: the autoscaler's timers, metric readings and scale writes.

What status says is pure and lives in `aisched.policy.serving_status`.
"""

from aisched.controller.serving.controller import InferenceServiceController

__all__ = ["InferenceServiceController"]
