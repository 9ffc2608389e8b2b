#!/usr/bin/env bash
# The local GPU cluster: a real control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) run as local processes, with fake
# GPU nodes and pod lifecycles simulated by kwok. No Docker needed.
#
#   hack/cluster.sh up [small|large|xlarge|empty|PATH.yaml]   start it (default small) and wait until it is ready
#   hack/cluster.sh down                         stop what `up` started and remove its state
#   hack/cluster.sh status                       tell what runs
#
# State (certificates, kubeconfigs, etcd data, logs, PIDs) lives in
# $AISCHED_CLUSTER_DIR (default <repo>/.cluster). Ports can be moved so that a
# second cluster (the test fixture's) runs beside a developer's:
#   AISCHED_APISERVER_PORT (6443)  AISCHED_ETCD_CLIENT_PORT (2379)  AISCHED_ETCD_PEER_PORT (2380)
#   AISCHED_CONTROLLER_MANAGER_PORT (10257)  AISCHED_SCHEDULER_PORT (10259)
# AISCHED_REAL_NODES=N adds N real nodes (kubelet, containerd; hack/real-nodes.sh).
# AISCHED_KARPENTER=1 runs Karpenter's KWOK provider beside it (hack/karpenter/: a node class,
# a GPU NodePool per capacity type, GPU instance types with prices), out of cluster: a pod
# nothing holds, or a NodeClaim, gets new fake GPU nodes (the `empty` preset: from zero).
# Its metrics and health ports: AISCHED_KARPENTER_METRICS_PORT (8090), AISCHED_KARPENTER_HEALTH_PORT (8091).
# AISCHED_FRAMEWORKS=1 runs the job frameworks' own controllers beside it, out of cluster, with
# their CRDs: Kubeflow's training-operator (PyTorchJob) and KubeRay's operator (RayJob, RayCluster).
# Their ports: AISCHED_TRAINING_OPERATOR_METRICS_PORT (8092), AISCHED_TRAINING_OPERATOR_HEALTH_PORT
# (8093), AISCHED_TRAINING_OPERATOR_WEBHOOK_PORT (8094), AISCHED_KUBERAY_METRICS_PORT (8095),
# AISCHED_KUBERAY_HEALTH_PORT (8096).
# AISCHED_CLUSTER_TIMEOUT (seconds, default 300) bounds each wait of `up`;
# AISCHED_KWOK_LOG_LEVEL=INFO logs every stage kwok plays (default WARN: at
# INFO it logs each node's Lease renewal). AISCHED_NODE_LEASE_SECONDS (default
# 40) is the fake nodes' Lease duration; thousands of nodes need a longer one.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/node-network.sh
source "${HACK_DIR}/node-network.sh"

CLUSTER_DIR="$(realpath -m "${AISCHED_CLUSTER_DIR:-${REPO_ROOT}/.cluster}")"
STATE_FILE="${CLUSTER_DIR}/cluster.env"
PYTHON="${REPO_ROOT}/.venv/bin/python"
[[ -x "${PYTHON}" ]] || PYTHON=python3
# In the order `up` starts them.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
SERVICE_CIDR=10.96.0.0/16
SERVICE_FIRST_IP=10.96.0.1
POD_CIDR=10.244.0.1/16
# Client-side rate limit of kube-controller-manager and kube-scheduler. Their
# defaults (20 and 50 requests/s) make a 1,000-node cluster take minutes to
# lift the not-ready taints; clusters of that size raise them likewise.
CLIENT_QPS=200
# What a kubelet does by default: a 40 s Lease renewed every 10 s. The node
# lifecycle controller's grace period (50 s by default) must outlast a renewal.
NODE_LEASE_SECONDS="${AISCHED_NODE_LEASE_SECONDS:-40}"
NODE_GRACE_SECONDS=$((NODE_LEASE_SECONDS > 40 ? NODE_LEASE_SECONDS : 50))
# Parts of one GPU shared by DRA claims (alpha in 1.35): the API server keeps the
# fields, kube-scheduler counts what each claim consumes of a device. GenericWorkload
# (Beta in 1.37, off by default) serves PodGroups, and kube-scheduler's gang plugin
# binds a PodGroup's pods all or none: the operator makes one per gang it places.
FEATURE_GATES="${AISCHED_FEATURE_GATES:-DRAConsumableCapacity=true,GenericWorkload=true}"
# Beta API versions are off unless asked for: PodGroup and Workload are scheduling.k8s.io/v1beta1.
RUNTIME_CONFIG="${AISCHED_RUNTIME_CONFIG:-scheduling.k8s.io/v1beta1=true}"

usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

# -- processes ---------------------------------------------------------------

pid_file() { echo "${CLUSTER_DIR}/pids/$1.pid"; }

# running NAME: is the process `up` recorded for NAME alive, and still ours?
# Every component's command line names the state dir, so a recycled PID is
# never mistaken for one of ours.
running() {
  local file pid
  file="$(pid_file "$1")"
  [[ -f "${file}" ]] || return 1
  pid="$(<"${file}")"
  [[ -r "/proc/${pid}/cmdline" ]] && tr '\0' ' ' <"/proc/${pid}/cmdline" | grep -qF -- "${CLUSTER_DIR}/"
}

# start NAME ARGS...: run AISCHED_BIN_DIR/NAME in its own session (so a Ctrl-C
# meant for the caller does not reach it), logging to logs/NAME.log.
start() {
  local name="$1"; shift
  setsid "${AISCHED_BIN_DIR}/${name}" "$@" </dev/null >"${CLUSTER_DIR}/logs/${name}.log" 2>&1 &
  local pid=$!
  echo "${pid}" >"$(pid_file "${name}")"
  # Until the forked shell has exec'd setsid, and setsid the component, the PID's command line is
  # this script's, then setsid's; and while an exec is under way it reads empty, which `running`
  # takes for an exited component (CI lost a whole test module to that, the first readiness check
  # landing in setsid's exec on a loaded machine). So wait for the component's own command line.
  # A child that died before exec'ing is a zombie until reaped: an empty one read twice ends the wait.
  local cmdline empty=0 tries=0
  while ((empty < 2 && tries++ < 600)); do  # 30 s at most: `running` has the last word
    cmdline="$(tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null)" || break
    [[ "${cmdline}" == "${AISCHED_BIN_DIR}/${name} "* ]] && break
    if [[ -z "${cmdline}" ]]; then empty=$((empty + 1)); else empty=0; fi
    sleep 0.05
  done
  log "started ${name} (pid ${pid})"
}

# stop NAME...: SIGTERM them together, then wait for each (SIGKILL after 10 s).
stop() {
  local name pid i pids=()
  for name in "$@"; do
    running "${name}" || continue
    pid="$(<"$(pid_file "${name}")")"
    kill -TERM "${pid}" 2>/dev/null && pids+=("${name}:${pid}")
  done
  for name in "${pids[@]}"; do
    pid="${name#*:}"
    for ((i = 0; i < 100; i++)); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.1
    done
    if kill -KILL "${pid}" 2>/dev/null; then log "killed ${name%%:*} (pid ${pid}): it ignored SIGTERM for 10s"
    else log "stopped ${name%%:*} (pid ${pid})"; fi
  done
}

# Clients first, so that nothing logs errors about a vanished API server.
stop_all() {
  stop training-operator kuberay-operator karpenter-kwok kwok kube-scheduler kube-controller-manager
  stop kube-apiserver
  stop etcd
}

# -- waiting -----------------------------------------------------------------

# wait_for WHAT LOG CMD...: retry CMD until it succeeds; on timeout show the
# end of the log of the component that should have made it true.
wait_for() {
  local what="$1" logname="$2" deadline=$((SECONDS + ${AISCHED_CLUSTER_TIMEOUT:-300})); shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      tail -n 30 "${CLUSTER_DIR}/logs/${logname}.log" >&2 || true
      die "timed out waiting for ${what} (log: ${CLUSTER_DIR}/logs/${logname}.log)"
    fi
    running "${logname}" || { tail -n 30 "${CLUSTER_DIR}/logs/${logname}.log" >&2; die "${logname} exited"; }
    sleep 0.5
  done
}

kubectl_admin() { "${AISCHED_BIN_DIR}/kubectl" --kubeconfig "${CLUSTER_DIR}/admin.kubeconfig" "$@"; }

etcd_healthy() { curl -fsS "http://127.0.0.1:${ETCD_CLIENT_PORT}/health" | grep -q '"health":"true"'; }
apiserver_ready() { kubectl_admin get --raw /readyz; }
default_serviceaccount() { kubectl_admin -n default get serviceaccount default; }

# nodes_ready N: N nodes are Ready and untainted (the node lifecycle controller
# has lifted the not-ready taint that admission put on each new node).
nodes_ready() {
  local ready
  ready="$(kubectl_admin get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}/{.spec.taints}{"\n"}{end}' | grep -c '^True/$')"
  ((ready >= $1))
}

# -- certificates and kubeconfigs --------------------------------------------

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# new_cert NAME SUBJECT EXTENSIONS [CA]: a key and a certificate signed by CA (default: the cluster CA).
new_cert() {
  local name="$1" subject="$2" extensions="$3" ca="${4:-ca}" pki="${CLUSTER_DIR}/pki"
  new_key "${pki}/${name}.key"
  openssl req -new -key "${pki}/${name}.key" -subj "${subject}" 2>/dev/null |
    openssl x509 -req -CA "${pki}/${ca}.crt" -CAkey "${pki}/${ca}.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 365 -extfile <(printf '%s\n' "${extensions}") -out "${pki}/${name}.crt" 2>/dev/null
}

client_cert() {
  new_cert "$1" "$2" "keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
}

make_pki() {
  local pki="${CLUSTER_DIR}/pki"
  mkdir -p "${pki}"
  new_key "${pki}/ca.key"
  openssl req -x509 -new -key "${pki}/ca.key" -subj "/CN=aisched-local-ca" -days 3650 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "${pki}/ca.crt" 2>/dev/null
  new_cert apiserver "/CN=kube-apiserver" "keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:${SERVICE_FIRST_IP},IP:${HOST_IP}"
  client_cert admin "/O=system:masters/CN=aisched-admin"
  # kube-apiserver's identity towards kubelets (logs, exec, port-forward).
  client_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  # The built-in RBAC roles of these two are bound to exactly these user names.
  client_cert kube-controller-manager "/CN=system:kube-controller-manager"
  client_cert kube-scheduler "/CN=system:kube-scheduler"
  # kwok acts as the kubelet of every fake node at once, which the Node
  # authorizer (one identity per node) cannot express.
  client_cert kwok "/O=system:masters/CN=kwok"
  # Karpenter reads and writes nodes, pods, its own kinds and evictions cluster-wide.
  client_cert karpenter "/O=system:masters/CN=karpenter"
  # The job frameworks' controllers: their own kinds, pods, Services, Jobs, events cluster-wide.
  client_cert training-operator "/O=system:masters/CN=training-operator"
  client_cert kuberay-operator "/O=system:masters/CN=kuberay-operator"
  # training-operator's webhook server will not start without a serving certificate; nothing
  # calls it (no webhook configuration points at it), so one from the cluster CA does.
  new_cert training-operator-webhook "/CN=training-operator" "keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1"
  # The front proxy: kube-apiserver's identity towards aggregated API servers
  # (metrics adapters), which kube-controller-manager and kube-scheduler also
  # expect to find in kube-system/extension-apiserver-authentication.
  new_key "${pki}/front-proxy-ca.key"
  openssl req -x509 -new -key "${pki}/front-proxy-ca.key" -subj "/CN=aisched-local-front-proxy-ca" -days 3650 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "${pki}/front-proxy-ca.crt" 2>/dev/null
  new_cert front-proxy-client "/CN=front-proxy-client" "keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth" front-proxy-ca
  # Service account tokens: kube-apiserver verifies, kube-controller-manager signs.
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "${pki}/sa.key" 2>/dev/null
  openssl pkey -in "${pki}/sa.key" -pubout -out "${pki}/sa.pub"
}

b64() { base64 -w0 "$1"; }

# kubeconfig USER: CLUSTER_DIR/USER.kubeconfig with the certificates inlined, so
# that the file works wherever it is copied.
kubeconfig() {
  local user="$1" pki="${CLUSTER_DIR}/pki"
  cat >"${CLUSTER_DIR}/${user}.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: aisched-local
    cluster:
      server: https://127.0.0.1:${APISERVER_PORT}
      certificate-authority-data: $(b64 "${pki}/ca.crt")
users:
  - name: ${user}
    user:
      client-certificate-data: $(b64 "${pki}/${user}.crt")
      client-key-data: $(b64 "${pki}/${user}.key")
contexts:
  - name: aisched-local
    context: {cluster: aisched-local, user: ${user}}
current-context: aisched-local
EOF
}

# -- the components ----------------------------------------------------------

start_etcd() {
  start etcd --name aisched --data-dir "${CLUSTER_DIR}/etcd" \
    --listen-client-urls "http://127.0.0.1:${ETCD_CLIENT_PORT}" \
    --advertise-client-urls "http://127.0.0.1:${ETCD_CLIENT_PORT}" \
    --listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster "aisched=http://127.0.0.1:${ETCD_PEER_PORT}" \
    --unsafe-no-fsync --log-level warn
}

start_apiserver() {
  local pki="${CLUSTER_DIR}/pki" network=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none)
  # Without real nodes the `kubernetes` Service's endpoints are switched off:
  # Endpoints may not hold loopback addresses, and no pod runs that could use
  # them. Real nodes reach it, and their pods its Service, on the host bridge.
  if ((REAL_NODES > 0)); then network=(--bind-address 0.0.0.0 --advertise-address "${HOST_IP}" --endpoint-reconciler-type lease); fi
  start kube-apiserver "${network[@]}" --secure-port "${APISERVER_PORT}" \
    --etcd-servers "http://127.0.0.1:${ETCD_CLIENT_PORT}" \
    --tls-cert-file "${pki}/apiserver.crt" --tls-private-key-file "${pki}/apiserver.key" \
    --client-ca-file "${pki}/ca.crt" \
    --requestheader-client-ca-file "${pki}/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "${pki}/front-proxy-client.crt" --proxy-client-key-file "${pki}/front-proxy-client.key" \
    --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "${pki}/sa.pub" --service-account-signing-key-file "${pki}/sa.key" \
    --service-cluster-ip-range "${SERVICE_CIDR}" \
    --kubelet-client-certificate "${pki}/apiserver-kubelet-client.crt" --kubelet-client-key "${pki}/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --allow-privileged --profiling=false --feature-gates "${FEATURE_GATES}" --runtime-config "${RUNTIME_CONFIG}"
}

start_controller_manager() {
  local pki="${CLUSTER_DIR}/pki" kc="${CLUSTER_DIR}/kube-controller-manager.kubeconfig"
  start kube-controller-manager \
    --kubeconfig "${kc}" --authentication-kubeconfig "${kc}" --authorization-kubeconfig "${kc}" \
    --bind-address 127.0.0.1 --secure-port "${CONTROLLER_MANAGER_PORT}" \
    --controllers '*' --use-service-account-credentials \
    --service-account-private-key-file "${pki}/sa.key" --root-ca-file "${pki}/ca.crt" \
    --cluster-signing-cert-file "${pki}/ca.crt" --cluster-signing-key-file "${pki}/ca.key" \
    --service-cluster-ip-range "${SERVICE_CIDR}" --cluster-name aisched-local \
    --leader-elect=false --profiling=false --cert-dir "${CLUSTER_DIR}/serving" \
    --node-monitor-grace-period "${NODE_GRACE_SECONDS}s" \
    --kube-api-qps "${CLIENT_QPS}" --kube-api-burst "$((2 * CLIENT_QPS))" --feature-gates "${FEATURE_GATES}"
}

start_scheduler() {
  local kc="${CLUSTER_DIR}/kube-scheduler.kubeconfig"
  start kube-scheduler \
    --kubeconfig "${kc}" --authentication-kubeconfig "${kc}" --authorization-kubeconfig "${kc}" \
    --bind-address 127.0.0.1 --secure-port "${SCHEDULER_PORT}" \
    --leader-elect=false --profiling=false --cert-dir "${CLUSTER_DIR}/serving" \
    --kube-api-qps "${CLIENT_QPS}" --kube-api-burst "$((2 * CLIENT_QPS))" --feature-gates "${FEATURE_GATES}"
}

start_kwok() {
  start kwok --kubeconfig "${CLUSTER_DIR}/kwok.kubeconfig" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --config "${HACK_DIR}/kwok/kwok.yaml" --config "${HACK_DIR}/kwok/stages.yaml" \
    --cidr "${POD_CIDR}" --node-lease-duration-seconds "${NODE_LEASE_SECONDS}" \
    --v "${AISCHED_KWOK_LOG_LEVEL:-WARN}"
}

# Karpenter's KWOK provider (hack/build-k8s-binaries.sh builds it and copies its CRDs out of
# the Go module cache): the CRDs, then its node class and NodePools once they are served, then
# the controller. Its nodes carry the annotation our kwok manages, so kwok runs them and their pods.
karpenter_crds_established() {
  [[ "$(kubectl_admin get crd nodepools.karpenter.sh nodeclaims.karpenter.sh kwoknodeclasses.karpenter.kwok.sh \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Established")].status}{"\n"}{end}' | grep -c '^True$')" -eq 3 ]]
}
karpenter_ready() { curl -fsS "http://127.0.0.1:${KARPENTER_HEALTH_PORT}/readyz"; }
nodepools_ready() {
  [[ "$(kubectl_admin get nodepools -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$')" -ge 2 ]]
}

start_karpenter() {
  local crds="${AISCHED_BIN_DIR}/karpenter-crds"
  kubectl_admin apply --server-side -f "${crds}" >/dev/null
  # Not `kubectl wait`: on a CRD whose status has no conditions yet it fails rather than waits.
  wait_for "Karpenter's CRDs to be established" kube-apiserver karpenter_crds_established
  kubectl_admin apply --server-side -f "${HACK_DIR}/karpenter/fleet.yaml" >/dev/null
  # A copy in the state dir: its path on the command line is how `running` knows the process is ours.
  cp "${HACK_DIR}/karpenter/instance-types.json" "${CLUSTER_DIR}/karpenter-instance-types.json"
  KUBECONFIG="${CLUSTER_DIR}/karpenter.kubeconfig" SYSTEM_NAMESPACE=kube-system DISABLE_LEADER_ELECTION=true \
    METRICS_PORT="${KARPENTER_METRICS_PORT}" HEALTH_PROBE_PORT="${KARPENTER_HEALTH_PORT}" \
    BATCH_IDLE_DURATION=1s BATCH_MAX_DURATION=3s LOG_LEVEL=info \
    start karpenter-kwok --instance-types-file-path "${CLUSTER_DIR}/karpenter-instance-types.json"
  wait_for "Karpenter /readyz" karpenter-kwok karpenter_ready
  wait_for "the NodePools to be Ready" karpenter-kwok nodepools_ready
}

# The job frameworks' controllers (hack/build-k8s-binaries.sh frameworks builds them and copies
# their CRDs beside them). Only the PyTorchJob CRD of training-operator's six: the one kind aisched
# schedules, and each of those CRDs costs the API server half a megabyte of schema. Whether their
# kinds are served is read from discovery, not the CRDs' conditions: a get of these is megabytes.
framework_kinds_served() {
  kubectl_admin get --raw /apis/kubeflow.org/v1 | grep -qF '"name":"pytorchjobs"' &&
    [[ "$(kubectl_admin get --raw /apis/ray.io/v1 | grep -oE '"name":"ray(clusters|jobs|services)"' | wc -l)" -eq 3 ]]
}
training_operator_ready() { curl -fsS "http://127.0.0.1:${TRAINING_OPERATOR_HEALTH_PORT}/readyz"; }
kuberay_ready() { curl -fsS "http://127.0.0.1:${KUBERAY_HEALTH_PORT}/readyz"; }

# training-operator v1.8.1 has no flag to turn its webhook or certificate rotation off. The rotator
# keeps its certificates in a Secret of the operator's namespace (MY_POD_NAMESPACE, default
# kubeflow), which must exist, and will not start the controllers until a tls.crt exists in its
# fixed /tmp/k8s-webhook-server/serving-certs (in a pod, the Secret mounted there); it only checks
# that the file is there. The webhook server reads its certificate from $TMPDIR/k8s-webhook-server
# (controller-runtime's default), so with TMPDIR in the state dir each cluster serves its own, and
# the shared file in /tmp is a placeholder written once, never read, never removed (another
# cluster's operator may be starting against it).
training_operator_certificates() {
  local pki="${CLUSTER_DIR}/pki" dir="${CLUSTER_DIR}/training-operator/tmp/k8s-webhook-server/serving-certs"
  local shared=/tmp/k8s-webhook-server/serving-certs tmp
  mkdir -p "${dir}"
  cp "${pki}/training-operator-webhook.crt" "${dir}/tls.crt"
  cp "${pki}/training-operator-webhook.key" "${dir}/tls.key"
  if [[ ! -e "${shared}/tls.crt" ]]; then
    mkdir -p "${shared}"
    tmp="$(mktemp "${shared}/.tls.crt.XXXXXX")"
    cp "${dir}/tls.crt" "${tmp}" && mv -f "${tmp}" "${shared}/tls.crt"
  fi
  kubectl_admin -n kube-system create secret generic training-operator-webhook-cert >/dev/null
}

# The CRDs go in while the nodes come up: the API server takes seconds of CPU (several times
# that on a busy machine) over their 3.5 MB of schema, time `up` otherwise spends waiting.
apply_framework_crds() {
  kubectl_admin apply --server-side -f "${AISCHED_BIN_DIR}/training-operator-crds/kubeflow.org_pytorchjobs.yaml" \
    -f "${AISCHED_BIN_DIR}/kuberay-operator-crds" >/dev/null
}

start_frameworks() {
  wait "${FRAMEWORK_CRDS_PID}" || die "applying the job frameworks' CRDs failed"
  wait_for "the job frameworks' kinds to be served" kube-apiserver framework_kinds_served
  training_operator_certificates
  # Leader election is off by default; the Info level, since the default (development mode) is Debug.
  TMPDIR="${CLUSTER_DIR}/training-operator/tmp" MY_POD_NAMESPACE=kube-system \
    start training-operator --kubeconfig "${CLUSTER_DIR}/training-operator.kubeconfig" \
    --enable-scheme pytorchjob \
    --pytorch-init-container-template-file "${HACK_DIR}/training-operator/pytorch-init-container.yaml" \
    --pytorch-init-container-image aisched.local/torch-training:dev \
    --metrics-bind-address "127.0.0.1:${TRAINING_OPERATOR_METRICS_PORT}" \
    --health-probe-bind-address "127.0.0.1:${TRAINING_OPERATOR_HEALTH_PORT}" \
    --webhook-server-port "${TRAINING_OPERATOR_WEBHOOK_PORT}" --zap-log-level info
  # Leader election is on by default, in the pod's namespace, which out of cluster it has none of.
  # No --watch-namespace: all namespaces.
  start kuberay-operator --kubeconfig "${CLUSTER_DIR}/kuberay-operator.kubeconfig" \
    --enable-leader-election=false \
    --metrics-addr "127.0.0.1:${KUBERAY_METRICS_PORT}" \
    --health-probe-bind-address "127.0.0.1:${KUBERAY_HEALTH_PORT}" --log-stdout-encoder console
  wait_for "training-operator /readyz" training-operator training_operator_ready
  wait_for "kuberay-operator /readyz" kuberay-operator kuberay_ready
}

# create_nodes DESCRIPTION COUNT: one creation takes a round trip of tens of
# milliseconds, so a thousand nodes go in up to 8 parallel streams.
create_nodes() {
  local shards=$((($2 + 99) / 100)) i pids=() pid
  ((shards <= 8)) || shards=8
  for ((i = 0; i < shards; i++)); do
    PYTHONPATH="${REPO_ROOT}/operator" "${PYTHON}" -m aisched.testing.nodes --shard "${i}/${shards}" "$1" |
      kubectl_admin apply --server-side --field-manager aisched-cluster -f - >/dev/null &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do wait "${pid}" || die "creating the nodes failed"; done
}

# create_devices DESCRIPTION: the fake DRA driver's DeviceClass and one
# ResourceSlice per GPU node (aisched.testing.devices).
create_devices() {
  PYTHONPATH="${REPO_ROOT}/operator" "${PYTHON}" -m aisched.testing.devices "$1" |
    kubectl_admin apply --server-side --field-manager aisched-cluster -f - >/dev/null ||
    die "publishing the GPU devices failed"
}

# -- commands ----------------------------------------------------------------

description_file() {
  case "$1" in
    small | large | xlarge | empty) echo "${HACK_DIR}/clusters/$1.yaml" ;;
    *) [[ -f "$1" ]] || die "no cluster description '$1' (a preset: small, large, xlarge; or a YAML file)"
       realpath "$1" ;;
  esac
}

ensure_binaries() {
  local c
  local needed=("${COMPONENTS[@]}" kubectl)
  ((KARPENTER == 0)) || needed+=(karpenter-crds/.version)
  ((FRAMEWORKS == 0)) || needed+=(training-operator-crds/.version kuberay-operator-crds/.version)
  for c in "${needed[@]}"; do
    [[ -e "${AISCHED_BIN_DIR}/${c}" ]] && continue
    log "${c} is not in ${AISCHED_BIN_DIR}: building the binaries"
    "${HACK_DIR}/build-k8s-binaries.sh" >/dev/null
    return
  done
}

port_free() { ! ss -Htln "sport = :$1" | grep -q .; }

check_ports() {
  local var
  local vars=(APISERVER_PORT ETCD_CLIENT_PORT ETCD_PEER_PORT CONTROLLER_MANAGER_PORT SCHEDULER_PORT)
  ((KARPENTER == 0)) || vars+=(KARPENTER_METRICS_PORT KARPENTER_HEALTH_PORT)
  ((FRAMEWORKS == 0)) || vars+=(TRAINING_OPERATOR_METRICS_PORT TRAINING_OPERATOR_HEALTH_PORT
    TRAINING_OPERATOR_WEBHOOK_PORT KUBERAY_METRICS_PORT KUBERAY_HEALTH_PORT)
  for var in "${vars[@]}"; do
    port_free "${!var}" || die "port ${!var} is in use (another cluster?); choose another with AISCHED_${var}"
  done
}

# Ports come from the environment for a new cluster and from the state file
# for one that exists, so `status` and `down` find it whatever the caller's env.
ports_from_env() {
  APISERVER_PORT="${AISCHED_APISERVER_PORT:-6443}"
  ETCD_CLIENT_PORT="${AISCHED_ETCD_CLIENT_PORT:-2379}"
  ETCD_PEER_PORT="${AISCHED_ETCD_PEER_PORT:-2380}"
  CONTROLLER_MANAGER_PORT="${AISCHED_CONTROLLER_MANAGER_PORT:-10257}"
  SCHEDULER_PORT="${AISCHED_SCHEDULER_PORT:-10259}"
  REAL_NODES="${AISCHED_REAL_NODES:-0}"
  KARPENTER="${AISCHED_KARPENTER:-0}"
  KARPENTER_METRICS_PORT="${AISCHED_KARPENTER_METRICS_PORT:-8090}"
  KARPENTER_HEALTH_PORT="${AISCHED_KARPENTER_HEALTH_PORT:-8091}"
  FRAMEWORKS="${AISCHED_FRAMEWORKS:-0}"
  TRAINING_OPERATOR_METRICS_PORT="${AISCHED_TRAINING_OPERATOR_METRICS_PORT:-8092}"
  TRAINING_OPERATOR_HEALTH_PORT="${AISCHED_TRAINING_OPERATOR_HEALTH_PORT:-8093}"
  TRAINING_OPERATOR_WEBHOOK_PORT="${AISCHED_TRAINING_OPERATOR_WEBHOOK_PORT:-8094}"
  KUBERAY_METRICS_PORT="${AISCHED_KUBERAY_METRICS_PORT:-8095}"
  KUBERAY_HEALTH_PORT="${AISCHED_KUBERAY_HEALTH_PORT:-8096}"
}

load_ports() {
  ports_from_env
  if [[ -f "${STATE_FILE}" ]]; then
    # shellcheck source=/dev/null
    source "${STATE_FILE}"
  fi
  ((KARPENTER == 0)) || COMPONENTS+=(karpenter-kwok)
  ((FRAMEWORKS == 0)) || COMPONENTS+=(training-operator kuberay-operator)
}

print_usage_hint() {
  echo "export KUBECONFIG=${CLUSTER_DIR}/admin.kubeconfig"
  log "kubectl and helm are in ${AISCHED_BIN_DIR}; stop the cluster with: hack/cluster.sh down"
}

up_failed() {
  AISCHED_CLUSTER_DIR="${CLUSTER_DIR}" "${HACK_DIR}/real-nodes.sh" down
  stop_all
  log "the cluster did not come up; logs are in ${CLUSTER_DIR}/logs ('hack/cluster.sh down' removes them)"
}

cmd_up() {
  local description c alive=() nodes started=${SECONDS}
  description="$(description_file "${1:-small}")"
  if [[ -f "${STATE_FILE}" ]]; then
    for c in "${COMPONENTS[@]}"; do running "${c}" && alive+=("${c}"); done
    if ((${#alive[@]} == ${#COMPONENTS[@]})); then
      log "already up ($(grep '^DESCRIPTION=' "${STATE_FILE}" | cut -d= -f2-))"
      print_usage_hint
      return
    fi
    ((${#alive[@]} == 0)) || die "partly running (${alive[*]}); run 'hack/cluster.sh down' first"
    log "removing the state of a cluster that no longer runs"
    rm -rf "${CLUSTER_DIR}"
    ports_from_env
  fi
  nodes="$(PYTHONPATH="${REPO_ROOT}/operator" "${PYTHON}" -m aisched.testing.nodes --count "${description}")"
  ensure_binaries
  check_ports
  mkdir -p "${CLUSTER_DIR}/logs" "${CLUSTER_DIR}/pids"
  cat >"${STATE_FILE}" <<EOF
DESCRIPTION=${description}
APISERVER_PORT=${APISERVER_PORT}
ETCD_CLIENT_PORT=${ETCD_CLIENT_PORT}
ETCD_PEER_PORT=${ETCD_PEER_PORT}
CONTROLLER_MANAGER_PORT=${CONTROLLER_MANAGER_PORT}
SCHEDULER_PORT=${SCHEDULER_PORT}
REAL_NODES=${REAL_NODES}
KARPENTER=${KARPENTER}
KARPENTER_METRICS_PORT=${KARPENTER_METRICS_PORT}
KARPENTER_HEALTH_PORT=${KARPENTER_HEALTH_PORT}
FRAMEWORKS=${FRAMEWORKS}
TRAINING_OPERATOR_METRICS_PORT=${TRAINING_OPERATOR_METRICS_PORT}
TRAINING_OPERATOR_HEALTH_PORT=${TRAINING_OPERATOR_HEALTH_PORT}
TRAINING_OPERATOR_WEBHOOK_PORT=${TRAINING_OPERATOR_WEBHOOK_PORT}
KUBERAY_METRICS_PORT=${KUBERAY_METRICS_PORT}
KUBERAY_HEALTH_PORT=${KUBERAY_HEALTH_PORT}
EOF
  trap up_failed EXIT
  log "cluster state in ${CLUSTER_DIR}; ${nodes} nodes from ${description}"
  make_pki
  for c in admin kube-controller-manager kube-scheduler kwok karpenter training-operator kuberay-operator; do kubeconfig "${c}"; done

  start_etcd
  wait_for "etcd" etcd etcd_healthy
  start_apiserver
  wait_for "kube-apiserver /readyz" kube-apiserver apiserver_ready
  if ((FRAMEWORKS > 0)); then apply_framework_crds & FRAMEWORK_CRDS_PID=$!; fi
  start_controller_manager
  start_scheduler
  start_kwok
  log "creating ${nodes} fake GPU nodes"
  create_nodes "${description}" "${nodes}"
  log "created ${nodes} nodes; waiting for them to be Ready"
  wait_for "${nodes} Ready nodes" kwok nodes_ready "${nodes}"
  log "publishing the GPUs as DRA devices"
  create_devices "${description}"
  wait_for "the default ServiceAccount" kube-controller-manager default_serviceaccount
  if ((REAL_NODES > 0)); then AISCHED_CLUSTER_DIR="${CLUSTER_DIR}" "${HACK_DIR}/real-nodes.sh" up "${REAL_NODES}"; fi
  if ((KARPENTER > 0)); then start_karpenter; fi
  if ((FRAMEWORKS > 0)); then start_frameworks; fi
  trap - EXIT
  log "cluster up in $((SECONDS - started))s: ${nodes} GPU nodes, ${REAL_NODES} of them real"
  print_usage_hint
}

cmd_down() {
  if [[ ! -d "${CLUSTER_DIR}" ]]; then
    log "no cluster in ${CLUSTER_DIR}"
    return
  fi
  # Only ever delete a directory that `up` made.
  [[ -f "${STATE_FILE}" || -d "${CLUSTER_DIR}/pids" ]] ||
    die "${CLUSTER_DIR} does not look like a cluster state directory; not removing it"
  AISCHED_CLUSTER_DIR="${CLUSTER_DIR}" "${HACK_DIR}/real-nodes.sh" down
  stop_all
  rm -rf "${CLUSTER_DIR}"
  log "cluster down; removed ${CLUSTER_DIR}"
}

cmd_status() {
  local c pid
  if [[ ! -f "${STATE_FILE}" ]]; then
    echo "no cluster in ${CLUSTER_DIR}"
    return
  fi
  echo "cluster in ${CLUSTER_DIR} ($(grep '^DESCRIPTION=' "${STATE_FILE}" | cut -d= -f2-))"
  for c in "${COMPONENTS[@]}"; do
    pid="$(cat "$(pid_file "${c}")" 2>/dev/null || echo -)"
    if running "${c}"; then printf '  %-24s running  pid %s\n' "${c}" "${pid}"
    else printf '  %-24s stopped\n' "${c}"; fi
  done
  running kube-apiserver || return 0
  echo "  api server               https://127.0.0.1:${APISERVER_PORT}"
  kubectl_admin get nodes --no-headers \
    -o custom-columns='READY:.status.conditions[?(@.type=="Ready")].status,GPU:.status.allocatable.nvidia\.com/gpu' |
    awk '{n++; if ($1 == "True") r++; if ($2 != "<none>") g += $2}
         END {printf "  nodes                    %d (%d Ready), %d GPUs\n", n, r, g}'
  echo "export KUBECONFIG=${CLUSTER_DIR}/admin.kubeconfig"
}

main() {
  local command="${1:-}"
  [[ $# -gt 0 ]] && shift
  load_ports
  load_node_network "${CLUSTER_DIR}"
  case "${command}" in
    up) (($# <= 1)) || usage; cmd_up "$@" ;;
    down) (($# == 0)) || usage; cmd_down ;;
    status) (($# == 0)) || usage; cmd_status ;;
    *) usage ;;
  esac
}

main "$@"
