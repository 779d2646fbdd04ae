#!/usr/bin/env bash
# One process: server and one worker together (no process group).
#   CONFIG=my.toml OUT=run.h5 launch/local.sh --set run.rounds=50
# Runs in the repository's .venv (created on first use); DISTFL_NO_VENV=1: the environment
# already on PATH (launch/env.sh).
set -e
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
need distfl
CONFIG=${CONFIG:-}
OUT=${OUT:-distfl-run.h5}
set -x
exec distfl run ${CONFIG:+--config "$CONFIG"} --out "$OUT" --comm local "$@"
