#!/usr/bin/env bash
# torch.distributed across hosts without a scheduler: run this on every host, with the same
# NNODES, MASTER_ADDR and MASTER_PORT and each host's own NODE_RANK (0 on MASTER_ADDR's
# host). Global rank 0, the first rank of node 0, is the server; every other rank hosts
# clients. gloo talks over the interface that reaches MASTER_ADDR (GLOO_SOCKET_IFNAME
# overrides); NCCL when CUDA is present, one rank per GPU (set NPROC to the GPU count).
#   host0$ NNODES=2 NODE_RANK=0 MASTER_ADDR=host0 CONFIG=my.toml launch/torchrun_multinode.sh
#   host1$ NNODES=2 NODE_RANK=1 MASTER_ADDR=host0 CONFIG=my.toml launch/torchrun_multinode.sh
# runs: torchrun --nnodes 2 --node-rank N --nproc-per-node 2 --master-addr host0 \
#         --master-port 29555 -m distfl run --config my.toml --out distfl-run.h5 --comm torch ...
# Runs in the repository's .venv (created on first use); DISTFL_NO_VENV=1: the environment
# already on PATH (launch/env.sh), e.g. a host whose own environment has distfl.
set -e
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
need torchrun
NNODES=${NNODES:?set NNODES, the number of hosts}
NODE_RANK=${NODE_RANK:?set NODE_RANK, the index of this host: 0 on MASTER_ADDR, then 1, 2, ...}
MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR, the address or name of node 0}
MASTER_PORT=${MASTER_PORT:-29555}
NPROC=${NPROC:-2}
CONFIG=${CONFIG:-}
OUT=${OUT:-distfl-run.h5}
set -x
exec torchrun --nnodes "$NNODES" --node-rank "$NODE_RANK" --nproc-per-node "$NPROC" \
  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" -m distfl run \
  ${CONFIG:+--config "$CONFIG"} --out "$OUT" --comm torch "$@"
