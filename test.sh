#!/usr/bin/env bash
# The whole test suite: unit tests and real multi-process runs (torchrun, mpiexec, Slurm),
# DISTFL_TEST_WORKERS pytest processes side by side (pytest-xdist; default 3, each test
# module on one of them; 0: one process).
#   ./test.sh                 # everything
#   ./test.sh tests/unit -x   # pytest arguments are forwarded
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/ensure_venv.sh
# each launched rank compiles distfl's modules once, not every time (0.3 s of CPU a process)
unset PYTHONDONTWRITEBYTECODE
exec python -m pytest -n "${DISTFL_TEST_WORKERS:-3}" --dist loadfile "$@"
