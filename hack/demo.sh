#!/usr/bin/env bash
# The whole product on this machine: a local GPU cluster (real control plane,
# KWOK GPU nodes), the CRDs, the operator, and the example jobs.
#
#   hack/demo.sh          start everything (idempotent) and show the jobs
#   hack/demo.sh stop     stop the operator and the MIG manager stand-in (make cluster-down stops the rest)
#
# The examples (manifests/examples/*.yaml) run on the KWOK nodes, which play
# their pods. AISCHED_REAL_NODES=2 (make demo REAL_NODES=2; root) adds two real
# nodes and runs the examples there for real instead, in the images built here
# (aisched.testing.examples adds the real nodes' GPU product and taint), as the
# e2e tier does (tests/e2e/test_examples.py); and a real training job
# (manifests/examples/real-training) to interrupt.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLUSTER_DIR="${AISCHED_CLUSTER_DIR:-${REPO_ROOT}/.cluster}"
export KUBECONFIG="${CLUSTER_DIR}/admin.kubeconfig"
export PATH="${AISCHED_BIN_DIR}:${PATH}"
OPERATOR_PID="${CLUSTER_DIR}/operator.pid"
OPERATOR_LOG="${CLUSTER_DIR}/logs/operator.log"
MIG_MANAGER_PID="${CLUSTER_DIR}/mig-manager.pid"
MIG_MANAGER_LOG="${CLUSTER_DIR}/logs/mig-manager.log"
# The small preset's second on-demand H100 rack (as tests/integration/test_mig.py): the nodes a MIG
# manager runs on. How long it takes to apply a config: AISCHED_MIG_DELAY_SECONDS.
MIG_NODES=(us-east-1a-r02-n01 us-east-1a-r02-n02)
VENV="${REPO_ROOT}/.venv"
REAL_NODES="${AISCHED_REAL_NODES:-0}"
# Four GPUs a real node (the e2e tier's have two): the serving example keeps a GPU on each real node
# while it runs, and resnet-ddp wants two on one node beside it.
export AISCHED_REAL_NODE_GPUS="${AISCHED_REAL_NODE_GPUS:-4}"
REAL_JOB="${REPO_ROOT}/manifests/examples/real-training/trainingjob.yaml"
EXAMPLES="${REPO_ROOT}/manifests/examples"
# The examples' `checkpoints` claim: a hostPath volume here, both real nodes being this machine.
CHECKPOINTS="${CLUSTER_DIR}/checkpoints"

operator_running() {
  [[ -f "${OPERATOR_PID}" ]] && kill -0 "$(<"${OPERATOR_PID}")" 2>/dev/null
}

stop_operator() {
  if operator_running; then
    kill -TERM "$(<"${OPERATOR_PID}")"
    log "stopped the operator"
  fi
  rm -f "${OPERATOR_PID}"
}

start_operator() {
  if operator_running; then
    log "operator already running (pid $(<"${OPERATOR_PID}"))"
    return
  fi
  mkdir -p "$(dirname "${OPERATOR_LOG}")"
  # Standalone: one local replica, no leader Lease to wait for.
  # The local preset: the local cluster's nodes carry aisched.io/rack (docs/topology.md).
  AISCHED_METRICS_PORT="${AISCHED_METRICS_PORT:-8080}" AISCHED_HEALTH_PORT="${AISCHED_HEALTH_PORT:-8081}" \
    AISCHED_TOPOLOGY__PRESET="${AISCHED_TOPOLOGY__PRESET:-local}" \
    setsid "${VENV}/bin/aisched" run --standalone </dev/null >"${OPERATOR_LOG}" 2>&1 &
  echo "$!" >"${OPERATOR_PID}"
  log "started the operator (pid $!, log ${OPERATOR_LOG})"
}

mig_manager_running() {
  [[ -f "${MIG_MANAGER_PID}" ]] && kill -0 "$(<"${MIG_MANAGER_PID}")" 2>/dev/null
}

stop_mig_manager() {
  if mig_manager_running; then
    kill -TERM "$(<"${MIG_MANAGER_PID}")"
    log "stopped the MIG manager stand-in"
  fi
  rm -f "${MIG_MANAGER_PID}"
}

# NVIDIA's MIG manager, played by aisched.testing.mig_manager beside the operator as the integration
# tests run it: a MIG profile no node offers makes the operator repartition an idle MIG node.
start_mig_manager() {
  local node
  for node in "${MIG_NODES[@]}"; do
    # As the GPU Operator leaves a node its MIG manager runs on: MIG off, applied. Only labelled nodes
    # are ever repartitioned; a label set before (a demo run earlier) is kept.
    if [[ -z "$(kubectl get node "${node}" -o jsonpath='{.metadata.labels.nvidia\.com/mig\.config}')" ]]; then
      kubectl label node "${node}" nvidia.com/mig.config=all-disabled nvidia.com/mig.config.state=success \
        aisched.io/mig-manager-applied=all-disabled >/dev/null
    fi
  done
  if mig_manager_running; then
    log "MIG manager stand-in already running (pid $(<"${MIG_MANAGER_PID}"))"
    return
  fi
  mkdir -p "$(dirname "${MIG_MANAGER_LOG}")"
  setsid "${VENV}/bin/python" -m aisched.testing.mig_manager --kubeconfig "${KUBECONFIG}" \
    --delay-seconds "${AISCHED_MIG_DELAY_SECONDS:-20}" </dev/null >"${MIG_MANAGER_LOG}" 2>&1 &
  echo "$!" >"${MIG_MANAGER_PID}"
  log "started the MIG manager stand-in on ${MIG_NODES[*]} (pid $!, log ${MIG_MANAGER_LOG})"
}

wait_for_jobs() {
  local deadline=$((SECONDS + 120)) unsettled
  while ((SECONDS < deadline)); do
    # Settled: every job has a phase other than Placing.
    unsettled="$(kubectl get trainingjobs.aisched.io -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' |
      grep -cvE '^(Running|Queued|Deferred|Succeeded|Failed|Suspended)$' || true)"
    [[ "${unsettled}" == 0 ]] && return
    sleep 2
  done
  log "some jobs are still settling; watch them with: kubectl get tj -w"
}

# Not `kubectl wait`: on a CRD whose status has no conditions yet (right after it is created) it
# fails rather than waits.
crds_established() {
  local crd i established
  for ((i = 0; i < 120; i++)); do
    established=0
    for crd in trainingjobs inferenceservices queues; do
      [[ "$(kubectl get crd "${crd}.aisched.io" \
        -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]] &&
        established=$((established + 1))
    done
    ((established == 3)) && return 0
    sleep 0.5
  done
  return 1
}

main() {
  [[ -x "${VENV}/bin/aisched" ]] || die "no virtualenv: run 'make demo' (it creates .venv first)"
  AISCHED_CLUSTER_DIR="${CLUSTER_DIR}" "${HACK_DIR}/cluster.sh" up small
  kubectl apply --server-side -f "${REPO_ROOT}/crds/" >/dev/null
  crds_established || die "the aisched CRDs were not established within a minute"
  local examples=(--storage default "${CHECKPOINTS}")
  if ((REAL_NODES > 0)); then
    # torch: about 3.4 GB, 10 minutes cold, cached afterwards (docs/torchrun.md).
    "${HACK_DIR}/build-images.sh" training server torch
    AISCHED_CLUSTER_DIR="${CLUSTER_DIR}" "${HACK_DIR}/real-nodes.sh" import \
      "${AISCHED_CACHE_DIR}/images/"{training,server,torch}.tar
    examples+=(--real-nodes)
  fi
  mkdir -p "${CHECKPOINTS}" && chmod 1777 "${CHECKPOINTS}"
  start_mig_manager
  start_operator
  "${VENV}/bin/python" -m aisched.testing.examples "${examples[@]}" "${EXAMPLES}" | kubectl apply -f -
  if ((REAL_NODES > 0)); then kubectl apply -f "${REAL_JOB}"; fi
  kubectl apply -f "${EXAMPLES}/mig/"  # on the KWOK H100 nodes the MIG stand-in repartitions
  wait_for_jobs
  echo
  kubectl get aisched
  echo
  kubectl get pods -o wide
  if ((REAL_NODES > 0)); then
    # The real job's worker runs in containerd on a real node: show it training.
    kubectl wait --for=condition=Ready pod -l aisched.io/job-name=real-train --timeout=120s >/dev/null || true
    sleep 3
    echo; kubectl logs -l aisched.io/job-name=real-train --tail 3
  fi
  cat <<HINT

The operator runs in the background (log: ${OPERATOR_LOG}). Try:
  export KUBECONFIG=${KUBECONFIG} PATH=${AISCHED_BIN_DIR}:\$PATH
  kubectl describe tj llm-pretrain            # conditions and events say why
  kubectl get nodes -L nvidia.com/mig.config,nvidia.com/mig.config.state   # MIG repartitions (finetune-mig)
  hack/interrupt-node.sh <node of finetune-spot> --provider aws --notice 30
  kubectl get tj -w
  kubectl logs -f -l aisched.io/job-name=resnet-ddp                     # with REAL_NODES: torchrun for real
  kubectl logs -f -l aisched.io/job-name=real-train                     # with REAL_NODES: a real job
  hack/interrupt-node.sh <its node> --provider aws --notice 30          # it saves, moves, resumes
Stop everything with: make cluster-down
HINT
}

case "${1:-start}" in
  start) main ;;
  stop) stop_operator; stop_mig_manager ;;
  *) die "usage: hack/demo.sh [start|stop]" ;;
esac
