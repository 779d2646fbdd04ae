#!/usr/bin/env bash
# One process: server and one worker together (no process group).
#   CONFIG=my.toml OUT=run.h5 launch/local.sh --set run.rounds=50
set -ex
CONFIG=${CONFIG:-}
OUT=${OUT:-distfl-run.h5}
exec distfl run ${CONFIG:+--config "$CONFIG"} --out "$OUT" --comm local "$@"
