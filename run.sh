#!/usr/bin/env bash
# Quick start: the main job on the embedded default (digits, shipped with scikit-learn).
#   ./run.sh                          # writes distfl-run.h5 and prints the summary
#   ./run.sh --set run.rounds=50      # any `distfl run` arguments are forwarded
#   ./run.sh inspect distfl-run.h5    # any other distfl subcommand, without activating .venv
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/scripts/ensure_venv.sh"
case "${1:-}" in
  run|keys|inspect|report|status|gather|compare|suite|bench|-h|--help|--version) exec distfl "$@" ;;
  *) exec distfl run "$@" ;;
esac
