#!/usr/bin/env bash
# distfl on one GPU, every check in one go (within 8 minutes), one summary:
#
#   scripts/gpu_check.sh OUT_DIR                 # writes OUT_DIR/gpu-check.json and .txt
#   scripts/gpu_check.sh OUT_DIR --device cpu    # every part on the CPU, at a tiny size
#   scripts/gpu_check.sh OUT_DIR --only a,b      # some parts (env,a,b,c,d,e,n)
#
# OUT_DIR defaults to $DISTFL_GPU_CHECK_OUT, else ./gpu-check.
# PYTHON: the interpreter with torch (default: the repository's .venv, else python3).
# GPU_CHECK_WHEELS: a folder of wheels installed (into a temporary folder, no network)
# for the modules distfl needs that PYTHON lacks. Runs from the repository as it is:
# distfl need not be installed. What each part checks: scripts/gpu_check.py's docstring
# and docs/benchmarks.md ("The GPU check").
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
OUT_DIR="${DISTFL_GPU_CHECK_OUT:-gpu-check}"
if [[ $# -gt 0 && "$1" != -* ]]; then
  OUT_DIR="$1"
  shift
fi
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

if [[ -n "${GPU_CHECK_WHEELS:-}" ]]; then
  missing="$("$PYTHON" "$HERE/gpu_check.py" --missing)"
  if [[ -n "$missing" ]]; then
    site="$(mktemp -d)"
    # shellcheck disable=SC2086  # one word per distribution
    "$PYTHON" -m pip install --quiet --no-index --no-deps --find-links "$GPU_CHECK_WHEELS" \
      --target "$site" $missing
    export PYTHONPATH="$PYTHONPATH:$site"
  fi
fi

mkdir -p "$OUT_DIR"
exec "$PYTHON" "$HERE/gpu_check.py" --out "$OUT_DIR" "$@"
