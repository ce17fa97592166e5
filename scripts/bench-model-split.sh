#!/usr/bin/env bash
# Every way dtrain splits a model (rerunnable), issue 37: a deep MLP, the
# shipped MLP and the GPT on 2 and 4 local tasks under plain data parallelism,
# ZeRO-1/2/3 (with and without prefetch), tensor_parallel N, (at 4) 2 data x 2
# tensor, a pipeline of N stages and (at 4) 2 pipeline x 2 tensor, at the same
# global batch, in one run: step time,
# its communication share, the memory estimate and the measured training peak
# per task; for the deep MLP also PyTorch FSDP2 on the same model and tasks
# (the venv of scripts/torch-venv.sh, from PyPI) and the share of ZeRO-3's
# all-gathers that prefetch hid behind compute, from a trace
# (bench/model_split_modes.py says what each figure is).
# Usage: scripts/bench-model-split.sh [--repeats 3] [--models deep,mlp,gpt] [--tasks 2,4] [--json FILE]
#        [--modes "pipeline 2;pipeline 4;2 pipeline x 2 tensor"] (only those, with multi_worker_mirrored)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/dtrain ] || bash scripts/build.sh
exec python3 bench/model_split_modes.py --dtrain build/dtrain "$@"
