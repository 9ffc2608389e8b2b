#!/usr/bin/env bash
# Build the local control plane from the Go module proxy and cache it outside
# the repository: kube-apiserver, kube-controller-manager, kube-scheduler and
# kubectl (k8s.io/kubernetes), Karpenter's KWOK provider (karpenter-kwok, with
# its CRDs beside it in karpenter-crds/), the node components kubelet and kube-proxy
# (hack/real-nodes.sh runs them, with the fake GPU device plugin and pause of
# hack/node-tools), the job frameworks' controllers training-operator and kuberay-operator
# (their CRDs beside them in NAME-crds/), etcd, kwok and helm, at the versions pinned in
# hack/versions.env. Idempotent: a binary whose --version already matches is
# kept. Prints the cache's bin directory on stdout when done.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

command -v go >/dev/null 2>&1 || die "Go is not installed: the local cluster is built from source with the Go toolchain (https://go.dev/doc/install), then re-run 'make k8s-binaries'."

SRC_DIR="${AISCHED_CACHE_DIR}/src"
mkdir -p "${AISCHED_BIN_DIR}" "${SRC_DIR}"
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false" GOTOOLCHAIN=local

# has_version BINARY VERSION ARGS...: does BINARY exist and print VERSION?
has_version() {
  local bin="${AISCHED_BIN_DIR}/$1" want="$2"; shift 2
  [[ -x "${bin}" ]] && "${bin}" "$@" 2>/dev/null | grep -qF -- "${want}"
}

build_kubernetes() {
  local v="${KUBERNETES_VERSION}" minor staging_v
  local components=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
  local missing=() c
  for c in "${components[@]}"; do
    if [[ "$c" == kubectl ]]; then has_version "$c" "${v}" version --client || missing+=("$c")
    else has_version "$c" "${v}" --version || missing+=("$c"); fi
  done
  if ((${#missing[@]} == 0)); then log "kubernetes ${v}: cached"; return; fi
  log "kubernetes ${v}: building ${missing[*]} (a cold build takes a while on few cores)"

  # k8s.io/kubernetes cannot be 'go install'ed: its go.mod points the staging
  # modules (k8s.io/api, k8s.io/client-go, ...) at ./staging as v0.0.0. A
  # wrapper module requires it and replaces each staging module with the
  # published v0.<minor>.<patch> release built from the same tree.
  minor="${v#v1.}"; staging_v="v0.${minor}"
  local mod_dir="${SRC_DIR}/kubernetes-${v}"
  mkdir -p "${mod_dir}"
  local upstream_mod
  upstream_mod="$(cd "${mod_dir}" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${v}" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')"
  [[ -f "${upstream_mod}" ]] || die "could not download k8s.io/kubernetes@${v} from the Go module proxy"
  {
    echo "module aisched.local/kubernetes-build"
    echo
    echo "go 1.25"
    echo
    echo "require k8s.io/kubernetes ${v}"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\t\1 => \1 '"${staging_v}"'#p' "${upstream_mod}"
    echo ")"
  } >"${mod_dir}/go.mod"
  local commit build_date major_minor="${v#v}"
  commit="$(cd "${mod_dir}" && go mod download -json "k8s.io/kubernetes@${v}" | sed -n 's/^\s*"Hash": "\(.*\)",\?$/\1/p' | head -1)"
  build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  local ldflags="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=${major_minor%%.*}"
    ldflags+=" -X ${pkg}.gitMinor=$(echo "${major_minor}" | cut -d. -f2)"
    ldflags+=" -X ${pkg}.gitCommit=${commit:-unknown} -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${build_date}"
  done
  local pkgs=()
  for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  (cd "${mod_dir}" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -tags selinux,notest -ldflags "${ldflags}" -o "${AISCHED_BIN_DIR}/" "${pkgs[@]}")
  "${AISCHED_BIN_DIR}/kube-apiserver" --version >&2
}

build_etcd() {
  local v="${ETCD_VERSION}"
  if has_version etcd "${v#v}" --version; then log "etcd ${v}: cached"; return; fi
  log "etcd ${v}: building"
  # go.etcd.io/etcd/server/v3 replaces its sibling modules with ../paths, so
  # it too needs a wrapper module that pins them to the same release.
  local mod_dir="${SRC_DIR}/etcd-${v}"
  mkdir -p "${mod_dir}"
  cat >"${mod_dir}/go.mod" <<MOD
module aisched.local/etcd-build

go 1.24

require go.etcd.io/etcd/server/v3 ${v}

replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 ${v}
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 ${v}
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 ${v}
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 ${v}
)
MOD
  (cd "${mod_dir}" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags "-s -w" -o "${AISCHED_BIN_DIR}/etcd" go.etcd.io/etcd/server/v3)
  "${AISCHED_BIN_DIR}/etcd" --version >&2
}

build_kwok() {
  local v="${KWOK_VERSION}"
  if has_version kwok "${v}" --version; then log "kwok ${v}: cached"; return; fi
  log "kwok ${v}: building"
  GOBIN="${AISCHED_BIN_DIR}" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${v#v}" "sigs.k8s.io/kwok/cmd/kwok@${v}"
  "${AISCHED_BIN_DIR}/kwok" --version >&2 || true
}

build_helm() {
  local v="${HELM_VERSION}"
  if has_version helm "${v}" version --short; then log "helm ${v}: cached"; return; fi
  log "helm ${v}: building"
  GOBIN="${AISCHED_BIN_DIR}" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${v}" "helm.sh/helm/v3/cmd/helm@${v}"
  "${AISCHED_BIN_DIR}/helm" version --short >&2
}

# Karpenter's KWOK provider: `go install`ed (the module has no replace directives) with the
# toolchain its go.mod asks for, renamed so that it does not replace KWOK's own binary. Its
# CRDs are copied out of the Go module cache beside it, for hack/cluster.sh to apply.
build_karpenter() {
  local v="${KARPENTER_VERSION}" crds="${AISCHED_BIN_DIR}/karpenter-crds" tmp dir
  if [[ -x "${AISCHED_BIN_DIR}/karpenter-kwok" && "$(cat "${crds}/.version" 2>/dev/null)" == "${v}" ]]; then
    log "karpenter ${v}: cached"; return
  fi
  log "karpenter ${v}: building its KWOK provider (with ${KARPENTER_GO_TOOLCHAIN}, fetched if missing)"
  tmp="$(mktemp -d)"
  GOTOOLCHAIN="${KARPENTER_GO_TOOLCHAIN}" GOBIN="${tmp}" go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/karpenter/kwok@${v}"
  mv "${tmp}/kwok" "${AISCHED_BIN_DIR}/karpenter-kwok"
  rmdir "${tmp}"
  dir="$(GOTOOLCHAIN="${KARPENTER_GO_TOOLCHAIN}" go mod download -json "sigs.k8s.io/karpenter@${v}" |
    sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')"
  [[ -d "${dir}/kwok/charts/crds" ]] || die "no kwok/charts/crds in sigs.k8s.io/karpenter@${v} (${dir})"
  rm -rf "${crds}" && mkdir -p "${crds}"
  cp "${dir}"/kwok/charts/crds/*.yaml "${dir}"/kwok/apis/crds/*.yaml "${crds}/"
  echo "${v}" >"${crds}/.version"
}

# A job framework's controller: `go install`ed from the Go module proxy (neither module has
# replace directives), renamed to NAME, its CRDs copied out of the module cache into
# NAME-crds/ for hack/cluster.sh to apply. build_framework NAME VERSION PACKAGE MODULE CRD_DIR.
build_framework() {
  local name="$1" v="$2" package="$3" module="$4" crd_dir="$5"
  local crds="${AISCHED_BIN_DIR}/${name}-crds" tmp dir
  if [[ -x "${AISCHED_BIN_DIR}/${name}" && "$(cat "${crds}/.version" 2>/dev/null)" == "${v}" ]]; then
    log "${name} ${v}: cached"; return
  fi
  log "${name} ${v}: building"
  tmp="$(mktemp -d)"
  GOBIN="${tmp}" go install -trimpath -ldflags "-s -w" "${package}@${v}"
  mv "${tmp}"/* "${AISCHED_BIN_DIR}/${name}"
  rmdir "${tmp}"
  dir="$(go mod download -json "${module}@${v}" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')"
  [[ -d "${dir}/${crd_dir}" ]] || die "no ${crd_dir} in ${module}@${v} (${dir})"
  rm -rf "${crds}" && mkdir -p "${crds}"
  cp "${dir}/${crd_dir}"/*.yaml "${crds}/"
  rm -f "${crds}/kustomization.yaml"
  echo "${v}" >"${crds}/.version"
}

# Kubeflow's training-operator (PyTorchJob and its siblings) and KubeRay's operator (RayJob,
# RayCluster): the real controllers of the kinds teams already run, which the integration
# tier's cluster runs (AISCHED_FRAMEWORKS=1 hack/cluster.sh up).
build_frameworks() {
  build_framework training-operator "${TRAINING_OPERATOR_VERSION}" \
    github.com/kubeflow/training-operator/cmd/training-operator.v1 \
    github.com/kubeflow/training-operator manifests/base/crds
  build_framework kuberay-operator "${KUBERAY_VERSION}" \
    github.com/ray-project/kuberay/ray-operator \
    github.com/ray-project/kuberay/ray-operator config/crd/bases
}

# Kueue's controller manager (sigs.k8s.io/kueue), the `workloads` benchmark's peer: `go install`ed
# from the Go module proxy (no replace directives; its go.mod asks for Go 1.25), its CRDs and
# webhook configurations and default Configuration copied out of the module cache beside it
# (kueue-crds/, kueue-webhooks.yaml, kueue-config.yaml) for the benchmark to apply. Not in
# `all`: only that benchmark runs it.
build_kueue() {
  local v="${KUEUE_VERSION}" crds="${AISCHED_BIN_DIR}/kueue-crds" tmp dir
  if [[ -x "${AISCHED_BIN_DIR}/kueue" && -f "${AISCHED_BIN_DIR}/kueue-config.yaml" &&
    "$(cat "${crds}/.version" 2>/dev/null)" == "${v}" ]]; then
    log "kueue ${v}: cached"; return
  fi
  log "kueue ${v}: building"
  tmp="$(mktemp -d)"
  GOBIN="${tmp}" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${v}" "sigs.k8s.io/kueue/cmd/kueue@${v}"
  mv "${tmp}/kueue" "${AISCHED_BIN_DIR}/kueue"
  rmdir "${tmp}"
  dir="$(go mod download -json "sigs.k8s.io/kueue@${v}" |
    sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')"
  [[ -d "${dir}/config/components/crd/bases" ]] || die "no config/components/crd/bases in sigs.k8s.io/kueue@${v} (${dir})"
  rm -rf "${crds}" && mkdir -p "${crds}"
  cp "${dir}"/config/components/crd/bases/*.yaml "${crds}/"
  cp "${dir}/config/components/webhook/manifests.yaml" "${AISCHED_BIN_DIR}/kueue-webhooks.yaml"
  cp "${dir}/config/components/manager/controller_manager_config.yaml" "${AISCHED_BIN_DIR}/kueue-config.yaml"
  echo "${v}" >"${crds}/.version"
}

# Cluster DNS for the real nodes (hack/real-nodes.sh): pods reach each other by the
# names of their job's headless Service, as torchrun's master address is given.
# CoreDNS with only the plugins it needs there (hack/coredns, its version pinned in
# that go.mod), rebuilt when those files change.
build_coredns() {
  local src="${HACK_DIR}/coredns" key
  key="$(cat "${src}/go.mod" "${src}/go.sum" "${src}/main.go" | sha256sum | cut -c1-16)"
  if [[ -x "${AISCHED_BIN_DIR}/coredns" && "$(cat "${AISCHED_BIN_DIR}/.coredns.key" 2>/dev/null)" == "${key}" ]]; then
    log "coredns: cached"; return
  fi
  log "coredns: building"
  (cd "${src}" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags "-s -w" -o "${AISCHED_BIN_DIR}/coredns" .)
  echo "${key}" >"${AISCHED_BIN_DIR}/.coredns.key"
}

# The real nodes' fake GPU device plugin and pod sandbox (hack/node-tools),
# rebuilt when their sources change.
build_node_tools() {
  local src="${HACK_DIR}/node-tools" key
  key="$(cat "${src}/go.mod" "${src}/go.sum" "${src}"/*/main.go | sha256sum | cut -c1-16)"
  if [[ -x "${AISCHED_BIN_DIR}/fake-gpu-plugin" && -x "${AISCHED_BIN_DIR}/pause" &&
    "$(cat "${AISCHED_BIN_DIR}/.node-tools.key" 2>/dev/null)" == "${key}" ]]; then
    log "node tools: cached"; return
  fi
  log "node tools: building fake-gpu-plugin and pause"
  (cd "${src}" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags "-s -w" \
    -o "${AISCHED_BIN_DIR}/" ./fake-gpu-plugin ./pause)
  echo "${key}" >"${AISCHED_BIN_DIR}/.node-tools.key"
}

# One Karpenter build at a time: `make test` starts one in the background (hack/build-k8s-binaries.sh
# karpenter) while the tiers that need no cluster run, and a later call waits for it here.
build_karpenter_once() {
  exec 9>"${AISCHED_CACHE_DIR}/.karpenter-build.lock"
  flock 9
  build_karpenter
  exec 9>&-
}

# One build of the frameworks at a time, as for Karpenter: `make test` starts one in the background.
build_frameworks_once() {
  exec 9>"${AISCHED_CACHE_DIR}/.frameworks-build.lock"
  flock 9
  build_frameworks
  exec 9>&-
}

# hack/build-k8s-binaries.sh [all|base|karpenter|coredns|frameworks|kueue]...: base is all but Karpenter's
# provider, CoreDNS (the real nodes' cluster DNS) and the job frameworks' controllers (about
# 7 minutes on 2 cores, cold), which only some tiers need.
main() {
  local start=${SECONDS} what
  log "cache: ${AISCHED_BIN_DIR}"
  for what in "${@:-all}"; do
    case "${what}" in
      all | base)
        build_etcd
        build_kwok
        build_helm
        build_kubernetes
        build_node_tools
        if [[ "${what}" == all ]]; then build_coredns; build_karpenter_once; build_frameworks_once; fi
        ;;
      karpenter) build_karpenter_once ;;
      coredns) build_coredns ;;
      frameworks) build_frameworks_once ;;
      kueue) build_kueue ;;
      *) die "usage: $0 [all|base|karpenter|coredns|frameworks|kueue]..." ;;
    esac
  done
  log "${*:-all}: ready in $((SECONDS - start))s"
  echo "${AISCHED_BIN_DIR}"
}

main "$@"
