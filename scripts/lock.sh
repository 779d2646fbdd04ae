#!/usr/bin/env bash
# Writes constraints.txt: the exact versions a fresh environment resolves today for what
# scripts/ensure_venv.sh installs (torch per DISTFL_TORCH, distfl[mpi,dev,dp], mlxtend,
# pandas). Run it on purpose, to move to newer versions; then run ./test.sh and commit the
# file with the result. ensure_venv.sh installs from the file; tests/unit/test_lock.py
# fails when the file and the installed versions or setup.cfg's requirements part ways.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
torch_spec="${DISTFL_TORCH:-torch==2.13.0}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
pip=("$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "$torch_spec" numpy
"${pip[@]}" "$root[mpi,dev,dp]"
"${pip[@]}" --no-deps "mlxtend>=0.19"
"${pip[@]}" --no-deps --target "$tmp/pandas" "pandas>=1.5"
{
  echo "# The versions the test suite passes with; scripts/ensure_venv.sh installs exactly these."
  echo "# Regenerate with scripts/lock.sh (newer versions, on purpose), then run ./test.sh."
  echo "# DISTFL_CONSTRAINTS= (empty) installs without them."
  {
    "$tmp/venv/bin/python" -m pip freeze --exclude-editable --all \
      | grep -viE '^(distfl|pip|setuptools|wheel)[=@ ]' | sed -E 's/^(torch==[^+]*)\+.*/\1/'
    "$tmp/venv/bin/python" - "$tmp/pandas" <<'PY'
import sys
from importlib import metadata
for dist in metadata.distributions(path=[sys.argv[1]]):
    print(f"{dist.metadata['Name']}=={dist.version}")
PY
  } | LC_ALL=C sort -f
} > "$root/constraints.txt.new"
mv "$root/constraints.txt.new" "$root/constraints.txt"
echo "wrote $root/constraints.txt"
