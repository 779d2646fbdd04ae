#!/usr/bin/env bash
# MPI through mpi4py: rank 0 is the server, ranks 1..NPROC-1 host clients.
# MPIEXEC must belong to the MPI that mpi4py was built against (pip's mpich: the venv's own).
#   NPROC=3 CONFIG=my.toml OUT=run.h5 launch/mpiexec.sh --set run.rounds=50
# runs: mpiexec -n 3 python -m distfl run --config my.toml --out run.h5 --comm mpi ...
set -ex
NPROC=${NPROC:-3}
CONFIG=${CONFIG:-}
OUT=${OUT:-distfl-run.h5}
PYTHON=${PYTHON:-python}
MPIEXEC=${MPIEXEC:-$(dirname "$(command -v "$PYTHON")")/mpiexec}
exec "$MPIEXEC" -n "$NPROC" "$PYTHON" -m distfl run \
  ${CONFIG:+--config "$CONFIG"} --out "$OUT" --comm mpi "$@"
