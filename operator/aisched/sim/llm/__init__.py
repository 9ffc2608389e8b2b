"""LLM serving simulation: continuously-batching servers behind a balancer, scaled by aisched and its peers.

- server: one vLLM-like replica, request by request (prefill, decode steps, KV capacity, load time),
  calibrated for a Llama-3-8B class model on one H100 from microsoft/vidur's profiles;
- trace: the Azure LLM inference traces (2023), read by path;
- fleet: replicas, a least-loaded balancer, scrapes, cold starts, draining scale-down;
- peers: HPA, KEDA, AIBrix's KPA, llm-d's saturation scaler as documented, and aisched's policy;
- capacity: a user's load test of one replica, and the check against a published figure;
- arms: every arm on one trace. benchmarks/serving.py records the figures; docs/serving_llm.md explains them.
"""
