# The environment of the launch scripts (each sources this file first): the repository's
# .venv, created on first use and put first on PATH, as ./run.sh does
# (scripts/ensure_venv.sh). DISTFL_NO_VENV=1 leaves PATH as it is, for an environment of
# your own (a cluster node's modules, a conda environment): the script then stops with one
# line when a command it needs is not there.
#   source "$(dirname "${BASH_SOURCE[0]}")/env.sh"; need torchrun
if [[ -z "${DISTFL_NO_VENV:-}" ]]; then
  source "$(dirname "${BASH_SOURCE[0]}")/../scripts/ensure_venv.sh"
fi

need() {  # each command must be found; else one line on how to get it, and exit 2
  local cmd
  for cmd in "$@"; do
    command -v "$cmd" >/dev/null 2>&1 && continue
    if [[ -n "${DISTFL_NO_VENV:-}" ]]; then
      echo "$(basename "$0"): $cmd not found on PATH (DISTFL_NO_VENV is set: the environment you activated is used); activate the one where distfl is installed, or unset DISTFL_NO_VENV to use the repository's .venv" >&2
    else
      echo "$(basename "$0"): $cmd not found, neither in the repository's .venv nor on PATH" >&2
    fi
    exit 2
  done
}
