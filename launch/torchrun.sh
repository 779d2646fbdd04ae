#!/usr/bin/env bash
# torch.distributed on one node: rank 0 is the server, ranks 1..NPROC-1 host clients.
# gloo on CPU; NCCL (plus a gloo group for control messages) when CUDA is present.
#   NPROC=3 CONFIG=my.toml OUT=run.h5 launch/torchrun.sh --set run.rounds=50
# runs: torchrun --standalone --nproc-per-node 3 -m distfl run --config my.toml --out run.h5 --comm torch ...
set -ex
NPROC=${NPROC:-3}
CONFIG=${CONFIG:-}
OUT=${OUT:-distfl-run.h5}
exec torchrun --standalone --nproc-per-node "$NPROC" -m distfl run \
  ${CONFIG:+--config "$CONFIG"} --out "$OUT" --comm torch "$@"
