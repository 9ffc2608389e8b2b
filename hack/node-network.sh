# The plumbing of hack/real-nodes.sh: addresses, network namespaces, the host
# bridge and cgroups of real nodes. Sourced; hack/cluster.sh uses the
# addresses too (the API server listens on the bridge's).
# shellcheck shell=bash disable=SC2034  # variables here are used by the scripts that source it

# load_node_network CLUSTER_DIR: the addresses of that cluster's real nodes.
# Two clusters on one machine (a developer's and the tests') get different
# subnets from a checksum of their directories.
load_node_network() {
  local sum
  sum="$(printf '%s' "$1" | cksum | cut -d' ' -f1)"
  NODE_NET=$((sum % 250 + 1))
  BRIDGE="aisch${NODE_NET}"
  HOST_IP="172.29.${NODE_NET}.1"
  POD_SUPERNET="10.$((100 + NODE_NET % 100)).0.0/16"
  REAL_NODE_GPU_PRODUCT=Fake-GPU
  APISERVER_PORT="${AISCHED_APISERVER_PORT:-6443}"
  if [[ -f "$1/cluster.env" ]]; then
    APISERVER_PORT="$(sed -n 's/^APISERVER_PORT=//p' "$1/cluster.env")"
  fi
}

node_ip() { echo "172.29.${NODE_NET}.$((10 + $1))"; }
pod_cidr() { echo "10.$((100 + NODE_NET % 100)).$1.0/24"; }
node_netns() { echo "aisched-${NODE_NET}-n$1"; }
node_cgroup() { echo "aisched-${NODE_NET}-n$1"; }

cgroup_hierarchies() { awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts; }

make_host_bridge() {
  ip link show "${BRIDGE}" >/dev/null 2>&1 || ip link add "${BRIDGE}" type bridge
  ip addr replace "${HOST_IP}/24" dev "${BRIDGE}"
  ip link set "${BRIDGE}" up
}

remove_host_bridge() {
  if ip link show "${BRIDGE}" >/dev/null 2>&1; then ip link del "${BRIDGE}"; fi
}

# make_node_netns I COUNT: node I's namespace, wired to the host bridge, with
# routes to the pods of the other nodes (and the host's route to its pods).
make_node_netns() {
  local i="$1" count="$2" ns host_if j
  ns="$(node_netns "$i")"; host_if="${BRIDGE}n$i"
  remove_node_netns "$i"
  ip netns add "${ns}"
  ip link add "${host_if}" type veth peer name eth0 netns "${ns}"
  ip link set "${host_if}" master "${BRIDGE}" up
  ip -n "${ns}" addr add "$(node_ip "$i")/24" dev eth0
  ip -n "${ns}" link set eth0 up
  ip -n "${ns}" route add default via "${HOST_IP}"
  for ((j = 1; j <= count; j++)); do
    ((j == i)) || ip -n "${ns}" route add "$(pod_cidr "$j")" via "$(node_ip "$j")"
  done
  ip route replace "$(pod_cidr "$i")" via "$(node_ip "$i")" dev "${BRIDGE}"
}

# Deleting the namespace deletes its interfaces, the host's end of the veth
# and with it the host's route to the node's pods.
remove_node_netns() {
  local ns
  ns="$(node_netns "$1")"
  if [[ -e "/run/netns/${ns}" ]]; then ip netns del "${ns}"; fi
}

make_node_cgroup() {
  local h
  for h in $(cgroup_hierarchies); do
    mkdir -p "${h}/$1"
    # A v1 cpuset starts empty, and a cgroup without CPUs takes no process.
    if [[ -f "${h}/$1/cpuset.cpus" && -z "$(tr -d '[:space:]' <"${h}/$1/cpuset.cpus")" ]]; then
      cat "${h}/cpuset.cpus" >"${h}/$1/cpuset.cpus"
      cat "${h}/cpuset.mems" >"${h}/$1/cpuset.mems"
    fi
  done
}

# cgroup_pids CGROUP: every process in the subtree, in any hierarchy.
cgroup_pids() {
  local h
  for h in $(cgroup_hierarchies); do
    [[ -d "${h}/$1" ]] && find "${h}/$1" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u
}

# kill_cgroup CGROUP: SIGTERM everything in it, SIGKILL what is left after
# 5 s (the kubelet restarts containers meanwhile), then remove the cgroups.
kill_cgroup() {
  local pids attempt h
  for ((attempt = 0; attempt < 100; attempt++)); do
    pids="$(cgroup_pids "$1")"
    [[ -n "${pids}" ]] || break
    # shellcheck disable=SC2086  # one PID a word
    if ((attempt == 0)); then kill -TERM ${pids} 2>/dev/null || true
    elif ((attempt >= 25)); then kill -KILL ${pids} 2>/dev/null || true; fi
    sleep 0.2
  done
  [[ -z "$(cgroup_pids "$1")" ]] || die "processes of cgroup $1 survived SIGKILL: $(cgroup_pids "$1" | xargs)"
  for h in $(cgroup_hierarchies); do
    [[ -d "${h}/$1" ]] && find "${h}/$1" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  true
}
