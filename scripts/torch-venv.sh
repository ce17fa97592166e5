#!/usr/bin/env bash
# Creates (idempotently) a Python venv with PyTorch 2.x from PyPI, the build
# users install (MKL and oneDNN inside; Debian's python3-torch runs on the
# reference BLAS and is no fair reference), and prints the venv's python path on
# stdout (all other output goes to stderr).
#
#   bash scripts/torch-venv.sh            # venv at build/torch-venv
#   TORCH_VENV=/some/dir bash scripts/torch-venv.sh
#
# PyPI's Linux wheel brings CUDA libraries too (a few GB); the benchmarks use
# its CPU path only. Needs PyPI. Called by benchmark scripts only, never by the
# tests.
set -euo pipefail

TORCH_PIN=${TORCH_PIN:-2.15.0}
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TORCH_VENV:-$repo_root/build/torch-venv}
py=$venv/bin/python

installed() {
  [ -x "$py" ] && "$py" - "$TORCH_PIN" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
sys.exit(0 if version("torch") == sys.argv[1] else 1)
PY
}

if installed; then
  echo "$py"
  exit 0
fi

echo "torch-venv: creating $venv (torch==$TORCH_PIN from PyPI)" >&2
mkdir -p "$(dirname "$venv")"
[ -x "$py" ] || python3 -m venv "$venv"
"$py" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$py" -m pip install --quiet --disable-pip-version-check "torch==$TORCH_PIN" numpy >&2

if ! installed; then
  echo "torch-venv: installation in $venv failed the version check" >&2
  exit 1
fi
echo "$py"
