#!/usr/bin/env bash
# MPI through mpi4py: rank 0 is the server, ranks 1..NPROC-1 host clients.
# MPIEXEC must belong to the MPI that mpi4py was built against (pip's mpich: the venv's own).
#   NPROC=3 CONFIG=my.toml OUT=run.h5 launch/mpiexec.sh --set run.rounds=50
# runs: mpiexec -n 3 python -m distfl run --config my.toml --out run.h5 --comm mpi ...
# Runs in the repository's .venv (created on first use); DISTFL_NO_VENV=1: the environment
# already on PATH (launch/env.sh).
set -e
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
NPROC=${NPROC:-3}
CONFIG=${CONFIG:-}
OUT=${OUT:-distfl-run.h5}
PYTHON=${PYTHON:-python}
need "$PYTHON"
MPIEXEC=${MPIEXEC:-$(dirname "$(command -v "$PYTHON")")/mpiexec}
need "$MPIEXEC"
set -x
exec "$MPIEXEC" -n "$NPROC" "$PYTHON" -m distfl run \
  ${CONFIG:+--config "$CONFIG"} --out "$OUT" --comm mpi "$@"
