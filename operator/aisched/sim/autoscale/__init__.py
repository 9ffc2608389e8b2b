"""Autoscaling simulation: time within the latency target and GPU-hours on a bursty diurnal trace.

There is no public per-second trace of requests to a GPU model server, so the request
rate is generated from a documented, seeded model (aisched.sim.autoscale.demand,
`TraceModel`), in requests per second:

    rate(t) = base * diurnal(t) * weekly(t) * wander(t) * burst(t)

- diurnal: 1 + a1 sin(2 pi (h - 9) / 24) + a2 sin(4 pi (h - 7.5) / 24), h the hour of
  the day: a trough around 03:00 and a broad afternoon peak (peak / trough about 4,
  the shape of interactive inference services' daily curves);
- weekly: Saturdays and Sundays carry `weekend` of a weekday's load;
- wander: slow multiplicative noise, a mean-reverting (Ornstein-Uhlenbeck) process of
  the log rate with a 30-minute correlation time;
- bursts: a Poisson process of flash crowds (`bursts_per_day`), each multiplying
  the load by 1 + h, h drawn uniformly from `burst_height`, reached over a ramp
  of 1 to 5 minutes, held for an exponential time (mean `burst_minutes`), then
  decaying over a ramp as long.

Requests arriving in each 5-second tick are Poisson with that rate, and a request
counter per service is what Prometheus scrapes.

The cluster side (aisched.sim.autoscale.replicas), the same for every policy: each replica
serves `capacity` requests per second within the latency target and holds
`gpus_per_replica` GPUs from the moment it is created; it starts serving `startup` seconds
later (model load). Scale-down removes not-ready replicas first, then the newest.
Prometheus scrapes every `scrape` seconds; the metric is rate(counter[1m]) as of the last
scrape; the controller reconciles every 15 s, like HPA's sync period. Capacity meets demand
when ready replicas * capacity >= the arrival rate.

Policies:
- aisched: aisched.policy.autoscale.decide_replicas with ScalingBehavior.from_spec on
  an AutoscalingSpec that sets only min/max replicas and the target (API defaults
  for the rest).
- hpa_default: the same proportional law with the Kubernetes HPA's default
  behaviour: tolerance 0.1, no scale-up window, 300 s scale-down window, up by
  max(4 pods, 100%) per 15 s, down by 100% per 15 s. For an external metric with an
  AverageValue target this is HPA's algorithm.
- static_peak: ceil(peak rate / capacity) replicas, always ready.

Both autoscalers get the same target per replica (`target_fraction` of capacity,
the headroom a user leaves as with HPA's usual 70% CPU target).

`aisched simulate autoscale` runs it; benchmarks/autoscale.py records its figures.
"""
