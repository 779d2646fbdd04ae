#!/usr/bin/env bash
# Quick start: the main job on the embedded default (digits, shipped with scikit-learn).
#   ./run.sh                          # writes distfl-run.h5 and prints the summary
#   ./run.sh --set run.rounds=50      # any `distfl run` arguments are forwarded
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/scripts/ensure_venv.sh"
exec distfl run "$@"
