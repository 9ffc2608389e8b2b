#!/usr/bin/env bash
# Container images for the real nodes, built without a Docker engine or a
# registry and cached in $AISCHED_CACHE_DIR/images as docker archives that
# `hack/real-nodes.sh import` loads into each node's containerd:
#
#   hack/build-images.sh [pause|base|operator|training|torch|all]   (default all)
#
#   pause     aisched.local/pause:latest, the pod sandbox (hack/node-tools/pause)
#   base      aisched.local/python:3.11-bookworm: Debian bookworm's python3 and
#             pip from Debian packages (mmdebstrap), the stand-in for
#             python:3.11-slim-bookworm
#   operator  aisched.local/aisched:dev: the project's Dockerfile on that base
#   training  aisched.local/training:dev: the example training image
#             (manifests/examples/real-training), with the workload SDK and numpy only
#   server    aisched.local/model-server:dev: the InferenceService example's server
#             (manifests/examples/model-server), the base and prometheus-client
#   torch     aisched.local/torch-training:dev: PyPI's torch on CPU (gloo) with the
#             SDK and a DDP script for torchrun (manifests/examples/torch-training);
#             about 3 GiB, so not part of `all`: `all torch` builds both
#
# Each image is rebuilt only when its inputs change (a hash of them is kept
# beside the archive); buildah's layer cache makes a rebuild after a code
# change cheap. Needs root, mmdebstrap, umoci, buildah and skopeo
# (hack/install-node-packages.sh).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IMAGES_DIR="${AISCHED_CACHE_DIR}/images"
# buildah's own storage, beside the cache rather than in /var/lib/containers.
BUILDAH=(buildah --root "${AISCHED_CACHE_DIR}/containers/storage" --runroot "${AISCHED_CACHE_DIR}/containers/run" --storage-driver overlay)
BASE_IMAGE=aisched.local/python:3.11-bookworm
DEBIAN_SUITE=bookworm

usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

# up_to_date NAME KEY: is NAME's archive built from inputs hashing to KEY?
up_to_date() { [[ -f "${IMAGES_DIR}/$1.tar" && "$(cat "${IMAGES_DIR}/$1.key" 2>/dev/null)" == "$2" ]]; }
inputs_key() { cat "$@" | sha256sum | cut -c1-16; }
tree_key() { (cd "${REPO_ROOT}" && git ls-files -z --cached --others --exclude-standard -- "$@" | sort -z | xargs -0 cat) | sha256sum | cut -c1-16; }

# save NAME IMAGE KEY: export IMAGE from buildah's storage to NAME's archive.
save() {
  local tmp="${IMAGES_DIR}/$1.tar.tmp"
  rm -f "${tmp}"
  "${BUILDAH[@]}" push -q "$2" "docker-archive:${tmp}:$2" >/dev/null
  mv "${tmp}" "${IMAGES_DIR}/$1.tar"
  echo "$3" >"${IMAGES_DIR}/$1.key"
}

build_pause() {
  local key tmp
  [[ -x "${AISCHED_BIN_DIR}/pause" ]] || "${HACK_DIR}/build-k8s-binaries.sh" >/dev/null
  key="$(inputs_key "${AISCHED_BIN_DIR}/pause")"
  if up_to_date pause "${key}"; then log "pause: cached"; return; fi
  log "pause: building"
  tmp="$(mktemp -d)"
  # A single static binary in an empty image, as registry.k8s.io/pause is.
  umoci init --layout "${tmp}/oci"
  umoci new --image "${tmp}/oci:latest"
  umoci unpack --image "${tmp}/oci:latest" "${tmp}/bundle" >/dev/null
  install -m 0755 "${AISCHED_BIN_DIR}/pause" "${tmp}/bundle/rootfs/pause"
  umoci repack --image "${tmp}/oci:latest" "${tmp}/bundle"
  umoci config --image "${tmp}/oci:latest" --config.entrypoint /pause --config.user 65535:65535
  rm -f "${IMAGES_DIR}/pause.tar"
  skopeo copy -q "oci:${tmp}/oci:latest" "docker-archive:${IMAGES_DIR}/pause.tar:aisched.local/pause:latest"
  echo "${key}" >"${IMAGES_DIR}/pause.key"
  rm -rf "${tmp}"
}

build_base() {
  local key tmp container
  # The key: the suite and the lines between the "-- base" and "-- end" marks below.
  key="$(printf '%s' "${DEBIAN_SUITE} $(sed -n '/# -- base/,/# -- end/p' "${BASH_SOURCE[0]}")" | sha256sum | cut -c1-16)"
  if up_to_date base "${key}" && "${BUILDAH[@]}" inspect "${BASE_IMAGE}" >/dev/null 2>&1; then return; fi
  log "base: building ${BASE_IMAGE} from Debian ${DEBIAN_SUITE} packages"
  tmp="$(mktemp -d)"
  # -- base: what goes into the Python base image
  # The image is an application's Python, as python:slim is, so PEP 668's
  # marker goes; pip and setuptools are installed from Debian's wheels into
  # /usr/local (unlike Debian's python3-pip, an ordinary distribution that the
  # Dockerfile may uninstall). The hooks run in mmdebstrap's shell, with $1 the new root.
  # shellcheck disable=SC2016
  mmdebstrap --variant=minbase --include=python3,python3-pip-whl,python3-setuptools-whl,ca-certificates \
    --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
    --customize-hook='chroot "$1" sh -c "set -- /usr/share/python-wheels/pip-*.whl; python3 \$1/pip install -q --no-index --no-cache-dir \$1 /usr/share/python-wheels/setuptools-*.whl"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "${DEBIAN_SUITE}" "${tmp}/rootfs.tar" 2>"${tmp}/mmdebstrap.log" ||
    { tail -n 20 "${tmp}/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
  # -- end
  container="$("${BUILDAH[@]}" from scratch)"
  "${BUILDAH[@]}" add -q "${container}" "${tmp}/rootfs.tar" / >/dev/null
  "${BUILDAH[@]}" config --env LANG=C.UTF-8 --cmd python3 \
    --label org.opencontainers.image.description="Debian ${DEBIAN_SUITE} python3 from Debian packages" "${container}"
  "${BUILDAH[@]}" commit -q --rm "${container}" "${BASE_IMAGE}" >/dev/null
  save base "${BASE_IMAGE}" "${key}"
  rm -rf "${tmp}"
}

# bud NAME IMAGE DOCKERFILE CONTEXT KEY: a Dockerfile built on the base image
# (rebuilt when KEY or the base changes).
bud() {
  build_base
  set -- "$1" "$2" "$3" "$4" "$5-$(<"${IMAGES_DIR}/base.key")"
  if up_to_date "$1" "$5"; then log "$1: cached"; return; fi
  log "$1: building $2"
  # chroot isolation and the host's network: the build's RUN steps fetch
  # wheels from the package index and need no namespaces of their own. They
  # reach it as the host does: with its pip.conf (a mirror, say) and its CA
  # bundle (a TLS-inspecting proxy's CA), mounted for the build and never
  # written into a layer.
  local host_settings=() file
  for file in /etc/pip.conf /etc/ssl/certs/ca-certificates.crt; do
    [[ -f "${file}" ]] && host_settings+=(--volume "${file}:${file}:ro")
  done
  "${BUILDAH[@]}" bud -q --layers --isolation chroot --network host "${host_settings[@]}" \
    --build-arg "PYTHON_IMAGE=${BASE_IMAGE}" -f "$3" -t "$2" "$4" >/dev/null
  save "$1" "$2" "$5"
}

build_operator() {
  bud operator aisched.local/aisched:dev "${REPO_ROOT}/Dockerfile" "${REPO_ROOT}" \
    "$(tree_key Dockerfile pyproject.toml README.md operator)"
}

build_torch() {
  bud torch aisched.local/torch-training:dev "${REPO_ROOT}/manifests/examples/torch-training/Dockerfile" "${REPO_ROOT}" \
    "$(tree_key manifests/examples/torch-training operator/workload-sdk operator/aisched/workload operator/aisched/__init__.py)"
}

build_training() {
  bud training aisched.local/training:dev "${REPO_ROOT}/manifests/examples/real-training/Dockerfile" "${REPO_ROOT}" \
    "$(tree_key manifests/examples/real-training operator/workload-sdk operator/aisched/workload operator/aisched/__init__.py)"
}

build_server() {
  bud server aisched.local/model-server:dev "${REPO_ROOT}/manifests/examples/model-server/Dockerfile" "${REPO_ROOT}" \
    "$(tree_key manifests/examples/model-server)"
}

main() {
  local target started=${SECONDS}
  ((EUID == 0)) || die "building images here needs root (buildah's storage, mmdebstrap)"
  mkdir -p "${IMAGES_DIR}"
  (($#)) || set -- all
  for target in "$@"; do
    case "${target}" in
      pause) build_pause ;;
      base) build_base ;;
      operator) build_operator ;;
      training) build_training ;;
      server) build_server ;;
      torch) build_torch ;;
      all) build_pause; build_base; build_operator; build_training; build_server ;;
      *) usage ;;
    esac
  done
  log "images ready in $((SECONDS - started))s (${IMAGES_DIR})"
}

main "$@"
