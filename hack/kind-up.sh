#!/usr/bin/env bash
# The local GPU cluster on kind, for machines with Docker and internet access:
# a kind cluster, KWOK running inside it, and the same fake GPU nodes and pod
# lifecycle as hack/cluster.sh (hack/clusters/*.yaml, hack/kwok/stages.yaml).
#
#   hack/kind-up.sh [small|large|PATH.yaml]    create it (default small); idempotent
#   kind delete cluster --name aisched         remove it
#
# Needs docker, kind, kubectl and python3 with PyYAML (the repository's .venv has it).
# KIND_CLUSTER_NAME (aisched) and KIND_NODE_IMAGE (kindest/node:<KUBERNETES_VERSION>)
# may be set.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME="${KIND_CLUSTER_NAME:-aisched}"
NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:${KUBERNETES_VERSION}}"
KWOK_RELEASE="https://github.com/kubernetes-sigs/kwok/releases/download/${KWOK_VERSION}"
PYTHON="${REPO_ROOT}/.venv/bin/python"
[[ -x "${PYTHON}" ]] || PYTHON=python3

main() {
  local description="${1:-small}" context="kind-${NAME}"
  case "${description}" in small | large) description="${HACK_DIR}/clusters/${description}.yaml" ;; esac
  [[ -f "${description}" ]] || die "no cluster description '${description}'"
  local tool
  for tool in docker kind kubectl; do
    command -v "${tool}" >/dev/null || die "${tool} is needed; without Docker use hack/cluster.sh instead"
  done

  if kind get clusters | grep -qx "${NAME}"; then
    log "kind cluster ${NAME} exists"
  else
    kind create cluster --name "${NAME}" --image "${NODE_IMAGE}" --wait 120s
  fi
  local kubectl=(kubectl --context "${context}")

  log "installing kwok ${KWOK_VERSION} and the fake GPU lifecycle stages"
  "${kubectl[@]}" apply -f "${KWOK_RELEASE}/kwok.yaml"
  "${kubectl[@]}" -n kube-system rollout status deployment/kwok-controller --timeout 180s
  "${kubectl[@]}" apply -f "${HACK_DIR}/kwok/stages.yaml"

  local nodes
  nodes="$(PYTHONPATH="${REPO_ROOT}/operator" "${PYTHON}" -m aisched.testing.nodes --count "${description}")"
  log "creating ${nodes} fake GPU nodes from ${description}"
  PYTHONPATH="${REPO_ROOT}/operator" "${PYTHON}" -m aisched.testing.nodes "${description}" |
    "${kubectl[@]}" apply --server-side --field-manager aisched-cluster -f - >/dev/null
  "${kubectl[@]}" wait --for condition=Ready node --selector nvidia.com/gpu.present=true --timeout 300s >/dev/null
  log "kind cluster ${NAME} has ${nodes} fake GPU nodes; use: kubectl config use-context ${context}"
}

main "$@"
