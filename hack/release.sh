#!/usr/bin/env bash
# A release of this commit: the chart packaged and the operator image as an OCI archive, both
# carrying the one version (aisched.__version__), written to dist/:
#
#   hack/release.sh [OUT_DIR]          (make release; default dist/)
#
#   aisched-VERSION.tgz          `helm package` of helm/aisched (its version and appVersion
#                                must equal VERSION)
#   aisched-VERSION.oci.tar      the operator image, built from the Dockerfile by
#                                hack/build-images.sh (no Docker engine, no registry), tagged
#                                IMAGE:VERSION; IMAGE defaults to the chart's image.repository
#   aisched-VERSION.oci.digest   its manifest digest, for the chart's image.digest (skopeo copy
#                                to a registry keeps the manifest, and so the digest)
#   SHA256SUMS
#
# Then: skopeo copy oci-archive:dist/aisched-VERSION.oci.tar docker://REGISTRY/aisched:VERSION
# Needs root, as `make images` does (buildah's storage, mmdebstrap), and helm (make k8s-binaries).
# A tree with uncommitted changes is refused (ALLOW_DIRTY=1 builds it anyway): a release holds
# what a commit holds.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT="${1:-${REPO_ROOT}/dist}"
HELM="${AISCHED_BIN_DIR}/helm"
CHART="${REPO_ROOT}/helm/aisched"

# chart_field NAME: a top-level scalar of Chart.yaml, quotes dropped.
chart_field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "${CHART}/Chart.yaml"; }

main() {
  ((EUID == 0)) || die "a release builds the operator image, which needs root here (as make images)"
  [[ -x "${HELM}" ]] || die "helm is not built: run 'make k8s-binaries' first"
  local version image archive digest field
  version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "${REPO_ROOT}/operator/aisched/__init__.py")"
  [[ -n "${version}" ]] || die "operator/aisched/__init__.py has no __version__"
  for field in version appVersion; do
    [[ "$(chart_field "${field}")" == "${version}" ]] ||
      die "helm/aisched/Chart.yaml ${field} is '$(chart_field "${field}")' but aisched.__version__ is '${version}'"
  done
  if [[ -z "${ALLOW_DIRTY:-}" && -n "$(git -C "${REPO_ROOT}" status --porcelain)" ]]; then
    git -C "${REPO_ROOT}" status --short >&2
    die "uncommitted changes: commit them (or ALLOW_DIRTY=1 for a build that is no release)"
  fi
  image="${IMAGE:-$(sed -n 's/^  repository: *//p' "${CHART}/values.yaml" | head -n 1)}"
  [[ -n "${image}" ]] || die "no image repository: set IMAGE=registry.example.com/aisched"

  mkdir -p "${OUT}"
  "${HELM}" lint --strict "${CHART}" --kube-version "${KUBERNETES_VERSION}" >/dev/null
  "${HELM}" package "${CHART}" --destination "${OUT}" >/dev/null
  log "chart: ${OUT}/aisched-${version}.tgz"

  "${HACK_DIR}/build-images.sh" operator
  archive="${OUT}/aisched-${version}.oci.tar"
  rm -f "${archive}"
  skopeo copy -q "docker-archive:${AISCHED_CACHE_DIR}/images/operator.tar" "oci-archive:${archive}:${image}:${version}"
  digest="$(skopeo inspect --format '{{.Digest}}' "oci-archive:${archive}")"
  echo "${digest}" >"${OUT}/aisched-${version}.oci.digest"
  log "image: ${archive} (${image}:${version}, ${digest})"

  (cd "${OUT}" && sha256sum "aisched-${version}.tgz" "aisched-${version}.oci.tar" >SHA256SUMS)
  cat <<DONE
Release ${version} in ${OUT}. Push the image, then install the chart with it:
  skopeo copy oci-archive:${archive} docker://REGISTRY/aisched:${version}
  helm install aisched ${OUT}/aisched-${version}.tgz -n aisched-system --create-namespace \\
    --set image.repository=REGISTRY/aisched --set image.digest=${digest}
DONE
}

main "$@"
