"""A GPU fleet that grows and shrinks with the queue, in simulation: the `fleet` benchmark's model.

- catalog: instance types (8x H100, 8x H200, 8x A100, 1x/4x/8x L4) and their offerings' prices.
- fleet: nodes launched, Ready after a provisioning delay, interrupted by the spot traces,
  consolidated when empty; the bill in node-hours and money.
- replay: the event loop and the figures every arm shares.
- gangs: aisched's scheduler on the fleet, static or asking for capacity for whole gangs.
- karpenter: the kube-scheduler and Karpenter alone, pod by pod.
- arms: the four arms on one trace.
"""
