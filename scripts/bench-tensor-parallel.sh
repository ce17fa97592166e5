#!/usr/bin/env bash
# Tensor parallelism against data parallelism (rerunnable), issue 37: the
# shipped MLP and GPT on 2 and 4 local tasks under multi_worker_mirrored,
# tensor_parallel N and (at 4) 2 data x 2 tensor, at the same global batch, in
# one run: step time, its communication share, optimizer state and memory
# estimate per task (bench/tensor_parallel_modes.py says what each figure is).
# Usage: scripts/bench-tensor-parallel.sh [--repeats 3] [--models mlp,gpt] [--json FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/dtrain ] || bash scripts/build.sh
exec python3 bench/tensor_parallel_modes.py --dtrain build/dtrain "$@"
