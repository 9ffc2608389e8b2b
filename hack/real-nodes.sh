#!/usr/bin/env bash
# Real nodes beside the KWOK ones: each a kubelet with its own containerd,
# runc, CNI bridge, kube-proxy (iptables) and a fake GPU device plugin, joined
# to the cluster of hack/cluster.sh with a client certificate of its CA.
#
#   hack/real-nodes.sh up N              start N real nodes (hack/cluster.sh up does, with AISCHED_REAL_NODES=N)
#   hack/real-nodes.sh down              stop them and remove every trace (hack/cluster.sh down does)
#   hack/real-nodes.sh import ARCHIVE... import OCI/docker image archives into every node's containerd
#
# One node is one network namespace (its own interfaces, routes and iptables,
# so kube-proxy's rules and the CNI bridge never touch the host's) plus one
# mount namespace (the kubelet's fixed paths such as
# /var/lib/kubelet/device-plugins bound to the node's own directory), and one
# cgroup subtree (/aisched-<net>-n<i>) holding everything it runs, containers
# included, so that `down` finds every process. The namespaces are plumbed to
# a host bridge; the API server is reached on the bridge's address.
# Pods resolve names through CoreDNS on the bridge's address (the cluster DNS:
# a job's headless Service gives its workers the names torchrun rendezvouses on).
# Needs root, containerd, runc and the CNI plugins (hack/install-node-packages.sh).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/node-network.sh
source "${HACK_DIR}/node-network.sh"

CLUSTER_DIR="$(realpath -m "${AISCHED_CLUSTER_DIR:-${REPO_ROOT}/.cluster}")"
NODES_DIR="${CLUSTER_DIR}/nodes"
PKI="${CLUSTER_DIR}/pki"
CNI_BIN_DIR=/usr/lib/cni
# Each fake node advertises this many nvidia.com/gpu through its device plugin.
GPUS_PER_NODE="${AISCHED_REAL_NODE_GPUS:-2}"
# Real nodes take only pods that tolerate this, so that the KWOK fleet's jobs
# (images that exist nowhere) never land on them.
REAL_NODE_TAINT="aisched.io/real-node=true:NoSchedule"
# The hostPath the example training job checkpoints to.
SHARED_DIR=/var/tmp/aisched-checkpoints

usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

node_dir() { echo "${NODES_DIR}/n$1"; }
node_name() { echo "real-node-$1"; }
kubectl_admin() { "${AISCHED_BIN_DIR}/kubectl" --kubeconfig "${CLUSTER_DIR}/admin.kubeconfig" "$@"; }

# -- per-node files ------------------------------------------------------------

node_cert() {
  local i="$1" dir name ip
  dir="$(node_dir "$i")"; name="$(node_name "$i")"; ip="$(node_ip "$i")"
  sign_cert "${dir}/kubelet" "/O=system:nodes/CN=system:node:${name}" "keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
  sign_cert "${dir}/kubelet-serving" "/CN=${name}" "keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:${ip},DNS:${name}"
  # Bound to the built-in ClusterRole system:node-proxier.
  sign_cert "${dir}/kube-proxy" "/CN=system:kube-proxy" "keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
}

# sign_cert PREFIX SUBJECT EXTENSIONS: PREFIX.key and PREFIX.crt signed by the cluster CA.
sign_cert() {
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null
  openssl req -new -key "$1.key" -subj "$2" 2>/dev/null |
    openssl x509 -req -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 365 -extfile <(printf '%s\n' "$3") -out "$1.crt" 2>/dev/null
}

node_kubeconfig() {
  local prefix="$1"
  cat >"${prefix}.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: aisched-local
    cluster: {server: "https://${HOST_IP}:${APISERVER_PORT}", certificate-authority: "${PKI}/ca.crt"}
users:
  - name: node
    user: {client-certificate: "${prefix}.crt", client-key: "${prefix}.key"}
contexts:
  - name: aisched-local
    context: {cluster: aisched-local, user: node}
current-context: aisched-local
EOF
}

node_config() {
  local i="$1" dir ip
  dir="$(node_dir "$i")"; ip="$(node_ip "$i")"
  mkdir -p "${dir}"/{containerd,cni,cni-cache,device-plugins,kubelet,pod-logs,container-logs,run-containerd}
  node_cert "$i"
  node_kubeconfig "${dir}/kubelet"
  node_kubeconfig "${dir}/kube-proxy"
  sed -e "s#@DIR@#${dir}#g" "${HACK_DIR}/real-node/containerd.toml" >"${dir}/containerd.toml"
  sed -e "s#@DIR@#${dir}#g" -e "s#@POD_CIDR@#$(pod_cidr "$i")#g" \
    "${HACK_DIR}/real-node/cni.conflist" >"${dir}/cni/10-aisched.conflist"
  sed -e "s#@DIR@#${dir}#g" -e "s#@IP@#${ip}#g" -e "s#@CA@#${PKI}/ca.crt#g" -e "s#@DNS@#${HOST_IP}#g" \
    -e "s#@CGROUP@#/$(node_cgroup "$i")#g" -e "s#@POD_CIDR@#$(pod_cidr "$i")#g" \
    "${HACK_DIR}/real-node/kubelet.yaml" >"${dir}/kubelet.yaml"
  sed -e "s#@DIR@#${dir}#g" -e "s#@NAME@#$(node_name "$i")#g" -e "s#@CLUSTER_CIDR@#${POD_SUPERNET}#g" \
    "${HACK_DIR}/real-node/kube-proxy.yaml" >"${dir}/kube-proxy.yaml"
}

# node_labels I: the labels GPU Feature Discovery, the cloud and Karpenter put
# on a real GPU node, as aisched.testing.nodes gives the KWOK ones. Both real
# nodes share one zone and rack, so a gang may span them.
node_labels() {
  local labels=(
    "node.kubernetes.io/instance-type=local.real"
    "topology.kubernetes.io/region=us-east-1" "topology.kubernetes.io/zone=us-east-1a"
    "aisched.io/rack=us-east-1a-real" "aisched.io/real-node=true"
    "karpenter.sh/capacity-type=spot"
    "nvidia.com/gpu.present=true" "nvidia.com/gpu.product=${REAL_NODE_GPU_PRODUCT}"
    "nvidia.com/gpu.count=${GPUS_PER_NODE}" "nvidia.com/gpu.memory=1024"
  )
  local IFS=,
  echo "${labels[*]}"
}

# -- the cluster DNS -----------------------------------------------------------

dns_cgroup() { echo "aisched-${NODE_NET}-dns"; }

# CoreDNS on the host bridge's address, answering for cluster.local only (no
# forwarding: the pods here need no other names), from the API server's
# Services and EndpointSlices, in a cgroup of its own so that `down` finds it.
start_dns() {
  local corefile="${NODES_DIR}/Corefile"
  cat >"${corefile}" <<EOF
cluster.local:53 {
  bind ${HOST_IP}
  errors
  kubernetes cluster.local {
    kubeconfig ${CLUSTER_DIR}/admin.kubeconfig
  }
}
EOF
  make_node_cgroup "$(dns_cgroup)"
  # shellcheck disable=SC2016,SC2046  # expanded by the inner shell; one hierarchy a word
  setsid bash -c 'for h in "${@:3}"; do echo $$ >"${h}/$1/cgroup.procs"; done; exec "$2" -conf "$0"' \
    "${corefile}" "$(dns_cgroup)" "${AISCHED_BIN_DIR}/coredns" $(cgroup_hierarchies) \
    </dev/null >"${CLUSTER_DIR}/logs/coredns.log" 2>&1 &
}

# -- running a node ----------------------------------------------------------

# Runs inside the node's network and mount namespaces (see cmd_up): puts
# itself into the node's cgroup, binds the kubelet's and containerd's fixed
# paths to the node's directory, then runs the node's daemons until killed.
node_main() {
  local i="$1" dir name h
  dir="$(node_dir "$i")"; name="$(node_name "$i")"
  for h in $(cgroup_hierarchies); do echo "$$" >"${h}/$(node_cgroup "$i")/cgroup.procs"; done
  # Fixed paths of the kubelet (device plugins, container log links), of
  # containerd 1.6 (shim sockets in /run/containerd/s) and of libcni (its
  # result cache), private to this node.
  bind_private "${dir}/device-plugins" /var/lib/kubelet/device-plugins
  bind_private "${dir}/container-logs" /var/log/containers
  bind_private "${dir}/run-containerd" /run/containerd
  bind_private "${dir}/cni-cache" /var/lib/cni
  ip link set lo up
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  daemon "$i" containerd containerd --config "${dir}/containerd.toml"
  local deadline=$((SECONDS + 30))
  until [[ -S "${dir}/containerd.sock" ]]; do ((SECONDS < deadline)) || die "containerd did not start"; sleep 0.2; done
  # The sandbox image comes from the cache, as no registry is reachable.
  ctr --address "${dir}/containerd.sock" -n k8s.io images import "${AISCHED_CACHE_DIR}/images/pause.tar" >/dev/null
  daemon "$i" kubelet "${AISCHED_BIN_DIR}/kubelet" --config "${dir}/kubelet.yaml" \
    --kubeconfig "${dir}/kubelet.kubeconfig" --root-dir "${dir}/kubelet" \
    --hostname-override "${name}" --node-ip "$(node_ip "$i")" \
    --node-labels "$(node_labels "$i")" --register-with-taints "${REAL_NODE_TAINT}"
  daemon "$i" gpu-plugin "${AISCHED_BIN_DIR}/fake-gpu-plugin" --count "${GPUS_PER_NODE}" --id-prefix "GPU-${name}"
  daemon "$i" kube-proxy "${AISCHED_BIN_DIR}/kube-proxy" --config "${dir}/kube-proxy.yaml"
  wait
}

bind_private() {
  mkdir -p "$2"
  mount --bind "$1" "$2"
}

daemon() {
  local i="$1" name="$2"; shift 2
  "$@" </dev/null >"${CLUSTER_DIR}/logs/n${i}-${name}.log" 2>&1 &
}

node_running() {
  local pid_file
  pid_file="$(node_dir "$1")/node.pid"
  [[ -f "${pid_file}" ]] && tr '\0' ' ' <"/proc/$(<"${pid_file}")/cmdline" 2>/dev/null | grep -q "real-nodes.sh _node $1"
}

start_node() {
  local i="$1"
  node_running "$i" && { log "$(node_name "$i") already runs"; return; }
  node_config "$i"
  make_node_cgroup "$(node_cgroup "$i")"
  make_node_netns "$i" "$(<"${NODES_DIR}/count")"
  # nsenter joins the node's network namespace; unshare gives it a mount
  # namespace into which the host's mounts propagate but from which none leak.
  setsid nsenter --net="/run/netns/$(node_netns "$i")" unshare --mount --propagation slave \
    "${HACK_DIR}/real-nodes.sh" _node "$i" </dev/null >"${CLUSTER_DIR}/logs/n${i}-node.log" 2>&1 &
  echo "$!" >"$(node_dir "$i")/node.pid"
  log "started $(node_name "$i") (pid $!, ip $(node_ip "$i"), pods $(pod_cidr "$i"))"
}

real_nodes_ready() {
  local ready
  ready="$(kubectl_admin get nodes -l aisched.io/real-node=true \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}/{.status.allocatable.nvidia\.com/gpu}{"\n"}{end}' |
    grep -c "^True/${GPUS_PER_NODE}$")"
  ((ready >= $1))
}

cmd_up() {
  local count="$1" i started=${SECONDS}
  [[ "${count}" =~ ^[1-9][0-9]?$ ]] || die "the number of real nodes must be 1 to 99, not '${count}'"
  ((EUID == 0)) || die "real nodes need root (network namespaces, mounts, cgroups)"
  local missing=() c
  for c in containerd runc ctr nsenter unshare iptables conntrack; do command -v "$c" >/dev/null || missing+=("$c"); done
  [[ -x "${CNI_BIN_DIR}/bridge" ]] || missing+=("${CNI_BIN_DIR}/bridge")
  ((${#missing[@]} == 0)) || die "missing ${missing[*]}: run hack/install-node-packages.sh"
  for c in kubelet kube-proxy fake-gpu-plugin pause coredns; do
    [[ -x "${AISCHED_BIN_DIR}/${c}" ]] || { "${HACK_DIR}/build-k8s-binaries.sh" >/dev/null; break; }
  done
  [[ -f "${AISCHED_CACHE_DIR}/images/pause.tar" ]] || "${HACK_DIR}/build-images.sh" pause
  mkdir -p "${NODES_DIR}"
  echo "${count}" >"${NODES_DIR}/count"
  # Storage both nodes see, as a ReadWriteMany volume would be in a cloud;
  # it outlives the cluster, as checkpoints do.
  mkdir -p "${SHARED_DIR}" && chmod 1777 "${SHARED_DIR}"
  make_host_bridge
  start_dns
  for ((i = 1; i <= count; i++)); do start_node "$i"; done
  local deadline=$((SECONDS + ${AISCHED_CLUSTER_TIMEOUT:-300}))
  until real_nodes_ready "${count}" 2>/dev/null; do
    if ((SECONDS > deadline)); then
      tail -n 20 "${CLUSTER_DIR}"/logs/n1-kubelet.log >&2 || true
      die "timed out waiting for ${count} real nodes to be Ready with ${GPUS_PER_NODE} GPUs each"
    fi
    for ((i = 1; i <= count; i++)); do
      node_running "$i" || { tail -n 20 "${CLUSTER_DIR}/logs/n${i}-node.log" >&2; die "$(node_name "$i") exited"; }
    done
    sleep 1
  done
  log "${count} real nodes Ready in $((SECONDS - started))s"
}

cmd_down() {
  [[ -d "${NODES_DIR}" ]] || return 0
  local count i
  count="$(cat "${NODES_DIR}/count" 2>/dev/null || echo 0)"
  for ((i = 1; i <= count; i++)); do
    kill_cgroup "$(node_cgroup "$i")"
    remove_node_netns "$i"
  done
  kill_cgroup "$(dns_cgroup)"
  remove_host_bridge
  rm -rf "${NODES_DIR}"
  log "real nodes down"
}

cmd_import() {
  local count i archive
  count="$(cat "${NODES_DIR}/count" 2>/dev/null || echo 0)"
  ((count > 0)) || die "no real nodes run in ${CLUSTER_DIR}"
  # The nodes unpack in parallel: each import is mostly one containerd's disk work.
  local pids=() pid
  for ((i = 1; i <= count; i++)); do
    (for archive in "$@"; do
      ctr --address "$(node_dir "$i")/containerd.sock" -n k8s.io images import "${archive}" >/dev/null
    done) &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do wait "${pid}" || die "importing $* failed"; done
  log "imported $* into ${count} nodes"
}

main() {
  local command="${1:-}"
  [[ $# -gt 0 ]] && shift
  load_node_network "${CLUSTER_DIR}"
  case "${command}" in
    up) (($# == 1)) || usage; cmd_up "$1" ;;
    down) (($# == 0)) || usage; cmd_down ;;
    import) (($# >= 1)) || usage; cmd_import "$@" ;;
    _node) node_main "$1" ;;
    *) usage ;;
  esac
}

main "$@"
