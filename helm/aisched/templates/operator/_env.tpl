{{/* The operator's settings as AISCHED_* variables (operator/aisched/settings.py); nested fields use "__". */}}
{{- define "aisched.settingsEnv" -}}
{{- $s := .Values.settings -}}
- name: AISCHED_NAMESPACES
  value: {{ $s.namespaces | toJson | quote }}
- name: AISCHED_LOG_LEVEL
  value: {{ $s.logLevel | quote }}
- name: AISCHED_DEFAULT_QUEUE
  value: {{ $s.defaultQueue | quote }}
- name: AISCHED_GPU_RESOURCE
  value: {{ $s.gpuResource | quote }}
- name: AISCHED_WORKER_PRIORITY_CLASS_NAME
  value: {{ $s.workerPriorityClassName | quote }}
- name: AISCHED_GPU_PRODUCT_LABEL
  value: {{ $s.gpuProductLabel | quote }}
- name: AISCHED_TOPOLOGY__PRESET
  value: {{ $s.topology.preset | quote }}
- name: AISCHED_TOPOLOGY__LEVELS
  value: {{ $s.topology.levels | toJson | quote }}
- name: AISCHED_SPOT_LABELS
  value: {{ $s.spotLabels | toJson | quote }}
- name: AISCHED_INTERRUPTION_TAINTS
  value: {{ $s.interruptionTaints | toJson | quote }}
- name: AISCHED_SPOT_NOTICE_SECONDS
  value: {{ $s.spotNoticeSeconds | quote }}
- name: AISCHED_NODE_NOT_READY_GRACE_SECONDS
  value: {{ $s.nodeNotReadyGraceSeconds | quote }}
- name: AISCHED_WORKLOAD_KINDS
  value: {{ (include "aisched.workloads.active" . | eq "true" | ternary .Values.workloads.kinds list) | toJson | quote }}
- name: AISCHED_RESYNC_SECONDS
  value: {{ $s.resyncSeconds | quote }}
- name: AISCHED_METRICS_PORT
  value: {{ .Values.metrics.port | quote }}
- name: AISCHED_HEALTH_PORT
  value: {{ .Values.health.port | quote }}
- name: AISCHED_METRICS_ADDRESS
  value: {{ .Values.metrics.address | quote }}
- name: AISCHED_HEALTH_ADDRESS
  value: {{ .Values.health.address | quote }}
- name: AISCHED_RELIST_SECONDS
  value: {{ $s.relistSeconds | quote }}
- name: AISCHED_LIST_PAGE_SIZE
  value: {{ $s.listPageSize | quote }}
- name: AISCHED_RECONCILES_PER_PASS
  value: {{ $s.reconcilesPerPass | quote }}
- name: AISCHED_ADMISSIONS_PER_CYCLE
  value: {{ $s.admissionsPerCycle | quote }}
- name: AISCHED_FIRST_SERVICE_BAND_GPU_SECONDS
  value: {{ $s.firstServiceBandGpuSeconds | quote }}
- name: AISCHED_EVENTS_PER_SECOND
  value: {{ $s.eventsPerSecond | quote }}
- name: AISCHED_EVENT_BURST
  value: {{ $s.eventBurst | quote }}
- name: AISCHED_API_REQUEST_TIMEOUT_SECONDS
  value: {{ $s.apiRequestTimeoutSeconds | quote }}
- name: AISCHED_API_QPS
  value: {{ $s.apiQPS | quote }}
- name: AISCHED_API_BURST
  value: {{ $s.apiBurst | quote }}
- name: AISCHED_LIVENESS_PASS_SECONDS
  value: {{ $s.livenessPassSeconds | quote }}
- name: AISCHED_LEADER_ELECTION
  value: {{ .Values.leaderElection.enabled | quote }}
- name: AISCHED_LEADER_LEASE_NAME
  value: {{ .Values.leaderElection.leaseName | quote }}
- name: AISCHED_LEADER_LEASE_SECONDS
  value: {{ .Values.leaderElection.leaseDurationSeconds | quote }}
- name: AISCHED_LEADER_RENEW_DEADLINE_SECONDS
  value: {{ .Values.leaderElection.renewDeadlineSeconds | quote }}
- name: AISCHED_LEADER_RETRY_SECONDS
  value: {{ .Values.leaderElection.retryPeriodSeconds | quote }}
# The Lease lives in the operator's own namespace, where its Role allows it.
- name: AISCHED_LEADER_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- with .Values.autoscaler.prometheusUrl }}
- name: AISCHED_AUTOSCALER__PROMETHEUS_URL
  value: {{ . | quote }}
{{- end }}
{{- if .Values.provisioning.enabled }}
- name: AISCHED_PROVISIONING__ENABLED
  value: "true"
- name: AISCHED_PROVISIONING__INSTANCE_TYPES_FILE
  value: /etc/aisched/provisioning/instance-types.json
- name: AISCHED_PROVISIONING__NODE_POOLS
  value: {{ .Values.provisioning.nodePools | toJson | quote }}
- name: AISCHED_PROVISIONING__NODE_CLASS_GROUP
  value: {{ .Values.provisioning.nodeClass.group | quote }}
- name: AISCHED_PROVISIONING__NODE_CLASS_KIND
  value: {{ .Values.provisioning.nodeClass.kind | quote }}
- name: AISCHED_PROVISIONING__NODE_CLASS_NAME
  value: {{ .Values.provisioning.nodeClass.name | quote }}
- name: AISCHED_PROVISIONING__BOOT_SECONDS
  value: {{ .Values.provisioning.bootSeconds | quote }}
{{- end }}
- name: AISCHED_AUTOSCALER__INTERVAL_SECONDS
  value: {{ .Values.autoscaler.intervalSeconds | quote }}
- name: AISCHED_CARBON__PROVIDER
  value: {{ .Values.carbon.provider | quote }}
- name: AISCHED_CARBON__REGION
  value: {{ .Values.carbon.region | quote }}
{{- with .Values.carbon.watttimeUsername }}
- name: AISCHED_CARBON__WATTTIME_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- with .Values.carbon.prometheusUrl }}
- name: AISCHED_CARBON__PROMETHEUS_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.carbon.prometheusQuery }}
- name: AISCHED_CARBON__PROMETHEUS_QUERY
  value: {{ . | quote }}
{{- end }}
- name: AISCHED_CARBON__MIN_CHUNK_SECONDS
  value: {{ .Values.carbon.minChunkSeconds | quote }}
{{- with .Values.carbon.dcgmPrometheusUrl }}
- name: AISCHED_CARBON__DCGM_PROMETHEUS_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.carbon.gpuPowerWatts }}
- name: AISCHED_CARBON__GPU_POWER_WATTS
  value: {{ . | toJson | quote }}
{{- end }}
{{- if .Values.carbon.apiKeySecret.name }}
- name: AISCHED_CARBON__API_KEY_FILE
  value: {{ printf "%s/api-key" (include "aisched.carbonKeyDir" .) | quote }}
{{- end }}
{{- end }}
