#!/usr/bin/env bash
# Creates (idempotently) a Python venv with the `tensorboard` package from PyPI,
# whose own event-file reader tests/integration/test_tensorboard.cpp uses to
# load dtrain's TensorBoard files, and prints the venv's python path on stdout
# (all other output goes to stderr). Also what you run `tensorboard --logdir
# <output.dir>/tensorboard` from.
#
#   bash scripts/tensorboard-venv.sh        # venv at build/tensorboard-venv
#
# Needs PyPI. Run it once by hand (or from a benchmark script); the test command
# never downloads, so without this venv that one test reports itself skipped.
set -euo pipefail

TB_PIN=${TB_PIN:-2.21.0}
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$repo_root/build/tensorboard-venv
py=$venv/bin/python

installed() {
  [ -x "$py" ] && "$py" -c "import sys, tensorboard; sys.exit(tensorboard.__version__ != '$TB_PIN')" >/dev/null 2>&1
}

if ! installed; then
  echo "tensorboard-venv: creating $venv (tensorboard==$TB_PIN)" >&2
  mkdir -p "$(dirname "$venv")"
  [ -x "$py" ] || python3 -m venv "$venv"
  "$py" -m pip install --quiet --disable-pip-version-check "tensorboard==$TB_PIN" >&2
  installed || { echo "tensorboard-venv: installation in $venv failed the version check" >&2; exit 1; }
fi
echo "$py"
