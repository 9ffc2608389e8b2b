{{/*
The workload kinds aisched holds and places (workload-gate.yaml, workload-guard.yaml, the
operator's ClusterRole): "true" when workloads.enabled and the cluster serves
MutatingAdmissionPolicy v1 (Kubernetes 1.36+). Without the mutating half nothing is held, so the
guard and the grants are left out too; NOTES.txt says so.
*/}}
{{- define "aisched.workloads.active" -}}
{{- if and .Values.workloads.enabled .Values.workloads.kinds (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end }}

{{/*
Each kind beside plain pods, as workloads.kinds names it (the policy model's WorkloadKind): its
API group and resource, where it is suspended (empty: it is not; Deployments and StatefulSets
are held by their pods' gates alone), and a CEL list of its pod templates, each a map of the
template's JSON pointer ('path') and what it lacks of the queue label ('state', below).
*/}}
{{- define "aisched.workloads.kinds" -}}
jobs.batch:
  group: batch
  resource: jobs
  kind: Job
  suspend: job
  templates: >-
    [{'path': '/spec/template', 'state': {{ include "aisched.workloads.templateState" "object.spec.template" }}}]
pytorchjobs.kubeflow.org:
  group: kubeflow.org
  resource: pytorchjobs
  kind: PyTorchJob
  suspend: runPolicy
  templates: >-
    has(object.spec.pytorchReplicaSpecs) ? object.spec.pytorchReplicaSpecs.transformList(type, replicas,
    has(replicas.template), {'path': '/spec/pytorchReplicaSpecs/' + type.replace('~', '~0').replace('/', '~1') + '/template',
    'state': {{ include "aisched.workloads.templateState" "replicas.template" }}}) : []
rayjobs.ray.io:
  group: ray.io
  resource: rayjobs
  kind: RayJob
  suspend: spec
  templates: >-
    !has(object.spec.rayClusterSpec) ? [] :
    (has(object.spec.rayClusterSpec.headGroupSpec) && has(object.spec.rayClusterSpec.headGroupSpec.template)
    ? [{'path': '/spec/rayClusterSpec/headGroupSpec/template', 'state': {{ include "aisched.workloads.templateState" "object.spec.rayClusterSpec.headGroupSpec.template" }}}] : [])
    + (has(object.spec.rayClusterSpec.workerGroupSpecs) ? object.spec.rayClusterSpec.workerGroupSpecs.transformList(i, group,
    has(group.template), {'path': '/spec/rayClusterSpec/workerGroupSpecs/' + string(i) + '/template', 'state': {{ include "aisched.workloads.templateState" "group.template" }}}) : [])
rayclusters.ray.io:
  group: ray.io
  resource: rayclusters
  kind: RayCluster
  suspend: spec
  templates: >-
    (has(object.spec.headGroupSpec) && has(object.spec.headGroupSpec.template)
    ? [{'path': '/spec/headGroupSpec/template', 'state': {{ include "aisched.workloads.templateState" "object.spec.headGroupSpec.template" }}}] : [])
    + (has(object.spec.workerGroupSpecs) ? object.spec.workerGroupSpecs.transformList(i, group,
    has(group.template), {'path': '/spec/workerGroupSpecs/' + string(i) + '/template', 'state': {{ include "aisched.workloads.templateState" "group.template" }}}) : [])
deployments.apps:
  group: apps
  resource: deployments
  kind: Deployment
  suspend: ""
  templates: >-
    [{'path': '/spec/template', 'state': {{ include "aisched.workloads.templateState" "object.spec.template" }}}]
statefulsets.apps:
  group: apps
  resource: statefulsets
  kind: StatefulSet
  suspend: ""
  templates: >-
    [{'path': '/spec/template', 'state': {{ include "aisched.workloads.templateState" "object.spec.template" }}}]
{{- end }}

{{/*
What the pod template at the CEL path given lacks of the queue label: 'metadata' (it has none),
'labels' (metadata but no labels), 'label' (labels but not this one with the queue's value), or
'' (nothing). A string, because a CEL map literal holds values of one type only.
*/}}
{{- define "aisched.workloads.templateState" -}}
{{- $label := include "aisched.workloads.queueLabel" . -}}
(!has({{ . }}.metadata) ? 'metadata' : !has({{ . }}.metadata.labels) ? 'labels' : '{{ $label }}' in {{ . }}.metadata.labels && {{ . }}.metadata.labels['{{ $label }}'] == variables.queue ? '' : 'label')
{{- end }}

{{- define "aisched.workloads.queueLabel" -}}
scheduling.aisched.io/queue
{{- end }}

{{/* Not made by KubeRay for a RayJob: no RayJob is its controller. */}}
{{- define "aisched.workloads.notMadeForARayJob" -}}
!has(object.metadata.ownerReferences) || !object.metadata.ownerReferences.exists(r,
has(r.controller) && r.controller && r.kind == 'RayJob' && r.apiVersion.startsWith('ray.io/'))
{{- end }}
