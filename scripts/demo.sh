#!/usr/bin/env bash
# Quick start, command 1: sets everything up on a fresh machine, builds dtrain
# alone (not the tests: a few minutes on 2 cores; a line per stage, the build's
# output in build/demo-build.log) and trains the shipped CNN on Fashion-MNIST,
# printing per-epoch progress and the test accuracy.
# Extra arguments go to `dtrain run`, e.g. scripts/demo.sh --set train.epochs=1
set -euo pipefail
cd "$(dirname "$0")/.."

t0=$SECONDS
bash scripts/build.sh --target dtrain --log build/demo-build.log
echo "build: ready in $(( SECONDS - t0 )) s (the tests build with scripts/test.sh)"
config=configs/fashion_mnist_cnn.json
echo "== dtrain run --config $config =="
# (--overwrite: the demo runs again into its own output.dir; a plain second
# `dtrain run` there is refused rather than overwrite the first run's results)
./build/dtrain run --config "$config" --summary runs/fashion_mnist_cnn/summary.json --overwrite "$@"
echo "== summary: runs/fashion_mnist_cnn/summary.json, metrics: runs/fashion_mnist_cnn/metrics.jsonl =="
