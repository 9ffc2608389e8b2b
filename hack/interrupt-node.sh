#!/usr/bin/env bash
# Simulate a spot interruption of one node of the local GPU cluster, the way
# the cloud's node manager announces it:
#
#   hack/interrupt-node.sh NODE [--provider aws|karpenter|gke] [--notice SECONDS]
#
#   aws        AWS Node Termination Handler: taint aws-node-termination-handler/spot-itn
#              (value: the interruption event) and cordon; notice 120 s
#   karpenter  Karpenter: taint karpenter.sh/disrupted; notice 120 s
#   gke        GKE: taint cloud.google.com/impending-node-termination; notice 30 s
#
# All taints are NoSchedule. After the notice the machine goes: the node's pods
# are deleted (their containers stop as on shutdown) and then the Node.
# Talks to $KUBECONFIG, or to the cluster of hack/cluster.sh when it is unset.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

main() {
  local node="" provider=aws notice=""
  while (($#)); do
    case "$1" in
      --provider) provider="${2:?--provider needs a value}"; shift 2 ;;
      --notice) notice="${2:?--notice needs a value}"; shift 2 ;;
      -h | --help) usage ;;
      -*) usage ;;
      *) [[ -z "${node}" ]] || usage; node="$1"; shift ;;
    esac
  done
  [[ -n "${node}" ]] || usage
  export KUBECONFIG="${KUBECONFIG:-${AISCHED_CLUSTER_DIR:-${REPO_ROOT}/.cluster}/admin.kubeconfig}"
  local kubectl="${AISCHED_BIN_DIR}/kubectl"
  [[ -x "${kubectl}" ]] || kubectl=kubectl

  local taint
  case "${provider}" in
    aws) taint="aws-node-termination-handler/spot-itn=spot-itn-$(date +%s):NoSchedule"; notice="${notice:-120}" ;;
    karpenter) taint="karpenter.sh/disrupted:NoSchedule"; notice="${notice:-120}" ;;
    gke) taint="cloud.google.com/impending-node-termination:NoSchedule"; notice="${notice:-30}" ;;
    *) die "unknown provider '${provider}' (aws, karpenter, gke)" ;;
  esac
  [[ "${notice}" =~ ^[0-9]+$ ]] || die "--notice takes whole seconds, not '${notice}'"

  "${kubectl}" get node "${node}" >/dev/null
  "${kubectl}" taint node "${node}" "${taint}" --overwrite >/dev/null
  if [[ "${provider}" == aws ]]; then "${kubectl}" cordon "${node}" >/dev/null; fi
  log "${node}: ${provider} interruption notice (${taint}); it goes in ${notice}s"
  sleep "${notice}"
  "${kubectl}" delete pods --all-namespaces --field-selector "spec.nodeName=${node}" --timeout 60s >/dev/null
  "${kubectl}" delete node "${node}" >/dev/null
  log "${node}: gone"
}

main "$@"
