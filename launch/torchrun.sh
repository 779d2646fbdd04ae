#!/usr/bin/env bash
# torch.distributed on one node: rank 0 is the server, ranks 1..NPROC-1 host clients.
# gloo on CPU; NCCL (plus a gloo group for control messages) when CUDA is present.
#   NPROC=3 CONFIG=my.toml OUT=run.h5 launch/torchrun.sh --set run.rounds=50
# runs: torchrun --standalone --nproc-per-node 3 -m distfl run --config my.toml --out run.h5 --comm torch ...
#
# A stop signal to this script (SIGTERM, SIGUSR1, SIGHUP, Ctrl-C) goes to the ranks alone:
# they write the last completed round and exit 0, and so does torchrun (a torchrun that is
# signalled itself exits 1 with a traceback of its own, however cleanly its ranks stopped).
# torchrun runs in a session of its own, out of reach of a terminal's Ctrl-C; after a
# Ctrl-C this script exits 130, as the shell expects of an interrupted command.
# Runs in the repository's .venv (created on first use); DISTFL_NO_VENV=1: the environment
# already on PATH (launch/env.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
need torchrun
NPROC=${NPROC:-3}
CONFIG=${CONFIG:-}
OUT=${OUT:-distfl-run.h5}
set -x
setsid torchrun --standalone --nproc-per-node "$NPROC" -m distfl run \
  ${CONFIG:+--config "$CONFIG"} --out "$OUT" --comm torch "$@" &
set +x
agent=$!
interrupted=0
forward() {  # the signal to torchrun's children, the ranks
  [[ "$1" == INT ]] && interrupted=1
  pkill "-$1" -P "$agent" || true
}
for sig in TERM USR1 HUP INT; do trap "forward $sig" "$sig"; done
while true; do
  status=0
  wait "$agent" || status=$?
  kill -0 "$agent" 2>/dev/null || break  # else a trapped signal ended the wait
done
(( status == 0 && interrupted )) && exit 130
exit "$status"
