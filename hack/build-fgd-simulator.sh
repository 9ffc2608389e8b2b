#!/usr/bin/env bash
# Build FGD's own simulator (the ATC'23 artifact, github.com/hkust-adsl/kubernetes-scheduler-simulator)
# into the cache, outside the repository, for benchmarks/fgd_artifact.py to run side by side
# with aisched.sim.sharing. Leaves, under ${AISCHED_CACHE_DIR}/fgd-simulator/:
#   src/    the artifact's module source as the Go module proxy serves it (its pod lists
#           under src/data/csv/, its scripts under src/scripts/ and src/data/)
#   bin/simon  its simulator, built from src/
#   pyenv/  a Python with pandas and PyYAML, which the artifact's own scripts import
# Nothing of it is copied into the repository. Idempotent: a complete cache is reused.
# The source comes from FGD_SIMULATOR_SRC (a checkout of the authors' repository) when set, else
# from the Go module proxy; the proxy answered 403 for every version tried (2026-12), so on a
# fresh machine here the script says so and exits 1.
# Prints the cache directory on stdout when done.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODULE="github.com/hkust-adsl/kubernetes-scheduler-simulator"
# The newest commit of the artifact's default branch when this was written (8f3d641, 2024-07-31).
FGD_SIMULATOR_VERSION="${FGD_SIMULATOR_VERSION:-v0.0.0-20240731233805-8f3d6417353c}"
DIR="${AISCHED_CACHE_DIR}/fgd-simulator"

command -v go >/dev/null 2>&1 || die "Go is not installed: FGD's simulator is built from source with the Go toolchain."

python_ready() { [[ -x "${DIR}/pyenv/bin/python" ]] && "${DIR}/pyenv/bin/python" -c 'import pandas, yaml' 2>/dev/null; }

if [[ -x "${DIR}/bin/simon" && -f "${DIR}/src/scripts/generate_config_and_run.py" ]] && python_ready; then
  log "fgd-simulator: cached in ${DIR}"
  echo "${DIR}"
  exit 0
fi
mkdir -p "${DIR}"

if [[ ! -f "${DIR}/src/go.mod" && -n "${FGD_SIMULATOR_SRC:-}" ]]; then
  # A checkout of the authors' repository made by hand (the proxy refuses the module: 403): built
  # in the cache as it is, vendor/ and all, never copied into this repository.
  [[ -f "${FGD_SIMULATOR_SRC}/go.mod" ]] || die "FGD_SIMULATOR_SRC=${FGD_SIMULATOR_SRC} holds no go.mod"
  log "fgd-simulator: taking the source from ${FGD_SIMULATOR_SRC}"
  rm -rf "${DIR}/src.partial"
  cp -r "${FGD_SIMULATOR_SRC}" "${DIR}/src.partial"
  mv "${DIR}/src.partial" "${DIR}/src"
fi

if [[ ! -f "${DIR}/src/go.mod" ]]; then
  log "fgd-simulator: downloading ${MODULE}@${FGD_SIMULATOR_VERSION} from the Go module proxy"
  probe="$(mktemp -d)"
  trap 'rm -rf "${probe}"' EXIT
  answer="$(cd "${probe}" && GOFLAGS=-mod=mod go mod download -json "${MODULE}@${FGD_SIMULATOR_VERSION}" || true)"
  module_dir="$(sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p' <<<"${answer}")"
  if [[ -z "${module_dir}" || ! -f "${module_dir}/go.mod" ]]; then
    reason="$(sed -n 's/^\s*"Error": "\(.*\)",\?$/\1/p' <<<"${answer}")"
    die "the Go module proxy does not serve ${MODULE}@${FGD_SIMULATOR_VERSION}: ${reason:-no answer} (FGD's simulator cannot be built on this machine; benchmarks/fgd_artifact.py takes --source and --binary for a build made elsewhere)"
  fi
  rm -rf "${DIR}/src.partial"
  cp -r "${module_dir}" "${DIR}/src.partial"
  chmod -R u+w "${DIR}/src.partial"  # the module cache is read-only; the artifact's scripts write beside it
  mv "${DIR}/src.partial" "${DIR}/src"
fi

if [[ ! -x "${DIR}/bin/simon" ]]; then
  # Module zips leave out vendor/: the dependencies then come from the proxy at go.sum's hashes.
  mod_mode=mod
  [[ -d "${DIR}/src/vendor/k8s.io" ]] && mod_mode=vendor
  log "fgd-simulator: building bin/simon (-mod=${mod_mode}; a cold build takes minutes on few cores)"
  (cd "${DIR}/src" && GOFLAGS="-mod=${mod_mode} -buildvcs=false" GOTOOLCHAIN=local go build -o "${DIR}/bin/simon.partial" ./cmd) ||
    die "building FGD's simulator failed (see the go output above)"
  mv "${DIR}/bin/simon.partial" "${DIR}/bin/simon"
fi

if ! python_ready; then
  log "fgd-simulator: a Python with pandas and PyYAML for the artifact's scripts"
  python3 -m venv "${DIR}/pyenv"
  "${DIR}/pyenv/bin/pip" install --quiet "pandas==2.*" "PyYAML==6.*" || die "could not install pandas and PyYAML into ${DIR}/pyenv"
fi

log "fgd-simulator: ready in ${DIR}"
echo "${DIR}"
