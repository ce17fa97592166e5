#!/usr/bin/env bash
# A worker killed mid-epoch (rerunnable), issue 36: dtrain's elastic job
# (`launch --workers 2:4`, the Fashion-MNIST CNN) against torchrun's elastic
# agent from PyPI PyTorch (DDP over gloo, the same model and global batch), in
# one run: the time from the kill to training again, the step time at each size,
# each epoch's samples against an uninterrupted run, and the test accuracy
# (bench/elastic_kill.py says exactly what it measures).
# Usage: scripts/bench-elastic.sh [--kill-step 60] [--epochs 3] [--skip-torch] [--json FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/dtrain ] || bash scripts/build.sh
py=$(bash scripts/torch-venv.sh)
exec "$py" bench/elastic_kill.py --dtrain build/dtrain "$@"
