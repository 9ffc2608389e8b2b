#!/usr/bin/env bash
# System tools the tests run for real, from Debian's packages: Prometheus and
# promtool (scraping the operator, checking metrics, rules and dashboard queries).
# Idempotent: installs only what is missing. Needs root (or sudo) the first time.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if ((${#missing[@]} == 0)); then
  log "prometheus and promtool: installed"
  exit 0
fi
sudo=()
((EUID == 0)) || sudo=(sudo)
log "installing ${missing[0]} from Debian's packages"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package starts a system service we do not want; the tests run their own.
if command -v systemctl >/dev/null 2>&1; then "${sudo[@]}" systemctl disable --now prometheus 2>/dev/null || true; fi
log "installed: $(prometheus --version 2>&1 | head -1)"
