# Shared by the hack/ scripts: where the cache lives and how to talk.
# shellcheck shell=bash disable=SC2034  # variables here are used by the scripts that source it

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HACK_DIR}/.." && pwd)"
# shellcheck source=hack/versions.env
source "${HACK_DIR}/versions.env"

# Outside the repository so that a fresh clone reuses what an earlier one built.
AISCHED_CACHE_DIR="${AISCHED_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/aisched}"
AISCHED_BIN_DIR="${AISCHED_CACHE_DIR}/bin"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
