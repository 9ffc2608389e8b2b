#!/usr/bin/env bash
# What real nodes and the image builds need, from Debian's packages (bookworm):
# containerd 1.6 (speaks CRI v1, which kubelet 1.35 requires), runc, the CNI
# plugins, iptables and conntrack (kube-proxy), and mmdebstrap, umoci, skopeo
# and buildah (hack/build-images.sh). Idempotent: installs only what is missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

declare -A PACKAGE_OF=(
  [containerd]=containerd [runc]=runc [/usr/lib/cni/bridge]=containernetworking-plugins
  [iptables]=iptables [conntrack]=conntrack [nsenter]=util-linux [ip]=iproute2
  [mmdebstrap]=mmdebstrap [umoci]=umoci [skopeo]=skopeo [buildah]=buildah
)
missing=()
for tool in "${!PACKAGE_OF[@]}"; do
  if [[ "${tool}" == /* ]]; then [[ -x "${tool}" ]] && continue
  else command -v "${tool}" >/dev/null 2>&1 && continue; fi
  missing+=("${PACKAGE_OF[${tool}]}")
done
if ((${#missing[@]} == 0)); then
  log "node packages: installed"
  exit 0
fi
sudo=()
((EUID == 0)) || sudo=(sudo)
log "installing ${missing[*]} from Debian's packages"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's containerd package starts a system-wide daemon; real nodes run their own.
if command -v systemctl >/dev/null 2>&1; then "${sudo[@]}" systemctl disable --now containerd 2>/dev/null || true; fi
log "installed ${missing[*]}"
