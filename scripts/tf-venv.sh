#!/usr/bin/env bash
# Creates (idempotently) a Python venv with TensorFlow (CPU build) and tf-keras
# for the TensorFlow reference benchmarks (bench/tf_ps_reference.py), and
# prints the venv's python path on stdout (all other output goes to stderr).
#
#   bash scripts/tf-venv.sh            # venv at build/tf-venv
#   TF_VENV=/some/dir bash scripts/tf-venv.sh
#
# Pins: tensorflow-cpu and tf-keras must share a minor version. tf-keras
# declares a dependency on the `tensorflow` distribution (the full, larger
# wheel), which tensorflow-cpu does not satisfy by name, so tf-keras is
# installed with --no-deps to keep pip from pulling in a second TensorFlow.
# Needs PyPI. Called by benchmark scripts only, never by the tests.
set -euo pipefail

TF_PIN=${TF_PIN:-2.21.0}
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TF_VENV:-$repo_root/build/tf-venv}
py=$venv/bin/python

installed() {
  [ -x "$py" ] && "$py" - "$TF_PIN" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
pin = sys.argv[1]
sys.exit(0 if version("tensorflow-cpu") == pin and version("tf-keras") == pin else 1)
PY
}

if installed; then
  echo "$py"
  exit 0
fi

echo "tf-venv: creating $venv (tensorflow-cpu==$TF_PIN, tf-keras==$TF_PIN)" >&2
mkdir -p "$(dirname "$venv")"
[ -x "$py" ] || python3 -m venv "$venv"
"$py" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$py" -m pip install --quiet --disable-pip-version-check "tensorflow-cpu==$TF_PIN" >&2
"$py" -m pip install --quiet --disable-pip-version-check --no-deps "tf-keras==$TF_PIN" >&2

if ! installed; then
  echo "tf-venv: installation in $venv failed the version check" >&2
  exit 1
fi
echo "$py"
