#!/usr/bin/env bash
# The whole test suite: unit tests and real multi-process runs (torchrun, mpiexec).
#   ./test.sh                 # everything
#   ./test.sh tests/unit -x   # pytest arguments are forwarded
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/ensure_venv.sh
exec python -m pytest "$@"
