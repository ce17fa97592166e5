#!/usr/bin/env bash
# Quick start, command 1: sets everything up on a fresh machine and trains the
# shipped CNN on Fashion-MNIST, printing per-epoch progress and the test accuracy.
# Extra arguments go to `dtrain run`, e.g. scripts/demo.sh --set train.epochs=1
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
config=configs/fashion_mnist_cnn.json
echo "== dtrain run --config $config =="
./build/dtrain run --config "$config" --summary runs/fashion_mnist_cnn/summary.json "$@"
echo "== summary: runs/fashion_mnist_cnn/summary.json, metrics: runs/fashion_mnist_cnn/metrics.jsonl =="
