{{/*
Prometheus rule groups: alerts and the recording rules that attribute DCGM GPU metrics to jobs.
Rendered into the PrometheusRule and, by hack/render-install.sh, into the plain rules file
manifests/prometheus-rules.yaml that promtool checks and tests (tests/unit/observability).
Aggregations such as `max by (...)` merge the series of the two operator replicas: only the
leader reports cluster state, but after a failover both have reported within a window.
*/}}

{{/* A DCGM series with its workload labels renamed to namespace and pod, when they are not already. */}}
{{- define "aisched.dcgmByPod" -}}
{{- $dcgm := .ctx.Values.prometheusRule.dcgm -}}
{{- $expr := .expr -}}
{{- if ne $dcgm.namespaceLabel "namespace" -}}
{{- $expr = printf "label_replace(%s, \"namespace\", \"$1\", %q, \"(.+)\")" $expr $dcgm.namespaceLabel -}}
{{- end -}}
{{- if ne $dcgm.podLabel "pod" -}}
{{- $expr = printf "label_replace(%s, \"pod\", \"$1\", %q, \"(.+)\")" $expr $dcgm.podLabel -}}
{{- end -}}
{{- $expr }}
  * on (namespace, pod) group_left (job_name, kind)
    max by (namespace, pod, job_name, kind) (aisched_job_pod_info)
{{- end }}

{{- define "aisched.ruleGroups" -}}
{{- $alerts := .Values.prometheusRule.alerts -}}
groups:
  - name: aisched.dcgm
    rules:
      # Mean utilisation (percent) of the GPUs of each job, where NVIDIA's DCGM exporter runs
      # with pod attribution.
      - record: aisched_job:dcgm_gpu_utilization:avg
        expr: |
          avg by (namespace, job_name, kind) (
            {{- include "aisched.dcgmByPod" (dict "expr" "DCGM_FI_DEV_GPU_UTIL" "ctx" .) | nindent 12 }}
          )
      # Power of each job's GPUs in watts: DCGM's energy counter is in millijoules.
      - record: aisched_job:dcgm_gpu_power_watts:sum
        expr: |
          sum by (namespace, job_name, kind) (
            {{- include "aisched.dcgmByPod" (dict "expr" "rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[5m]) / 1000" "ctx" .) | nindent 12 }}
          )
  - name: aisched.alerts
    rules:
      - alert: AischedDown
        expr: absent(up{job=~{{ .Values.prometheusRule.jobRegex | quote }}} == 1)
        for: 5m
        labels:
          severity: critical
        annotations:
          summary: No aisched operator replica is up.
          description: >-
            Prometheus has scraped no healthy aisched replica for 5 minutes: jobs are not being
            placed, resumed after interruptions or started after deferral.
      - alert: AischedNoLeader
        expr: max(aisched_leader) == 0
        for: 5m
        labels:
          severity: critical
        annotations:
          summary: aisched replicas are up but none holds the leader Lease.
          description: >-
            No replica has acted for 5 minutes. Check the Lease {{ .Values.leaderElection.leaseName }}
            in the operator's namespace and the operator logs.
      - alert: AischedJobQueuedTooLong
        expr: |
          time() - max by (namespace, job_name, queue) (aisched_job_queued_timestamp_seconds)
            > {{ $alerts.queuedTooLongSeconds }}
        for: 5m
        labels:
          severity: warning
        annotations:
          summary: >-
            {{`TrainingJob {{ $labels.namespace }}/{{ $labels.job_name }} has been queued for {{ $value | humanizeDuration }}.`}}
          description: >-
            {{`It waits in queue {{ $labels.queue }}`}} longer than {{ $alerts.queuedTooLongSeconds }}s.
            {{`kubectl describe trainingjobs.aisched.io -n {{ $labels.namespace }} {{ $labels.job_name }}`}} says what it waits for
            (quota, a topology domain large enough, or higher-priority work).
      - alert: AischedInterruptionRateHigh
        expr: sum by (capacity_type) (increase(aisched_interruptions_total[1h])) > {{ $alerts.interruptionsPerHour }}
        for: 10m
        labels:
          severity: warning
        annotations:
          summary: >-
            {{`{{ $value | humanize }} gang interruptions in the last hour on {{ $labels.capacity_type }} capacity.`}}
          description: >-
            More than {{ $alerts.interruptionsPerHour }} an hour. Spot capacity of this type is being
            reclaimed often; consider another GPU type or zone, or spot policy Prefer with a deadline.
      - alert: AischedLostWorkHigh
        expr: |
          sum(rate(aisched_lost_gpu_seconds_total[{{ $alerts.lostWorkWindow }}]))
            / clamp_min(avg_over_time(sum(max by (queue) (aisched_queue_gpus_used))[{{ $alerts.lostWorkWindow }}:5m]), 1)
            > {{ $alerts.lostWorkRatio }}
        for: 15m
        labels:
          severity: warning
        annotations:
          summary: >-
            {{`{{ $value | humanizePercentage }} of the GPU time of admitted jobs`}} was lost to interruptions over {{ $alerts.lostWorkWindow }}.
          description: >-
            Work since the last checkpoint is lost at every interruption. Check that jobs checkpoint
            (spec.checkpoint) and that interruptions are announced early enough to save.
      - alert: AischedDeadlineAtRisk
        expr: min by (namespace, job_name) (aisched_job_deadline_slack_seconds) < {{ $alerts.deadlineSlackSeconds }}
        for: 5m
        labels:
          severity: warning
        annotations:
          summary: >-
            {{`TrainingJob {{ $labels.namespace }}/{{ $labels.job_name }} may miss its deadline (slack {{ $value | humanizeDuration }}).`}}
          description: >-
            At its expected duration it finishes less than {{ $alerts.deadlineSlackSeconds }}s before its
            deadline, or after it when the slack is negative. Give its queue more GPUs or raise its priority.
      - alert: AischedReconcileErrors
        expr: |
          sum by (kind) (rate(aisched_reconcile_errors_total[10m]))
            / sum by (kind) (rate(aisched_reconcile_duration_seconds_count[10m]))
            > {{ $alerts.reconcileErrorRatio }}
        for: 15m
        labels:
          severity: warning
        annotations:
          summary: >-
            {{`{{ $value | humanizePercentage }} of {{ $labels.kind }} reconciles fail.`}}
          description: The operator logs and the objects' events say why.
{{- end }}
