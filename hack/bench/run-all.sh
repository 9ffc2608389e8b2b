#!/usr/bin/env bash
# Run every benchmark in hack/bench with its default arguments; each prints its
# figures and writes hack/bench/results/<name>.json. A benchmark is any
# hack/bench/*.py: add yours there, make its defaults sensible (minutes, not
# hours, on a small machine), and it runs here without touching this file.
# BENCH_ONLY="placement trace" runs just those.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-.venv/bin/python}
failed=()
for script in hack/bench/*.py; do
    name=$(basename "$script" .py)
    if [[ -n "${BENCH_ONLY:-}" && " $BENCH_ONLY " != *" $name "* ]]; then
        continue
    fi
    echo "== $name"
    if ! "$python" "$script"; then
        failed+=("$name")
    fi
done
if ((${#failed[@]})); then
    echo "failed: ${failed[*]}" >&2
    exit 1
fi
