#!/usr/bin/env bash
# Scaling benchmark (rerunnable): the Fashion-MNIST CNN trained with
# multi_worker_mirrored on 1, 2 and 4 local workers (`dtrain launch`), batch 64 per
# worker, 1 thread each, N steps; prints the job's training samples/s and the share
# of step time spent waiting for gradient all-reduces after backward (from the
# strategy's overlap instrumentation, the run summary's comm_wait_share).
# On a 2-core machine 4 workers share 2 cores: the figures show overhead, not speed-up.
# Usage: scripts/bench-scaling.sh [--steps N] [--workers "1 2 4"]
set -euo pipefail
cd "$(dirname "$0")/.."

steps=150 workers="1 2 4"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--workers \"1 2 4\"]" >&2; exit 2 ;;
  esac
done
[ -x build/dtrain ] || bash scripts/build.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

printf '%-8s %-10s %-14s %-16s %s\n' workers batch samples/s comm_wait_share per-worker-samples/s
for n in $workers; do
  timeout 900 build/dtrain launch --workers "$n" --config configs/fashion_mnist_cnn_multiworker.json \
    --threads 1 --set train.batch_size_per_replica=64 --set train.epochs=1 \
    --set train.steps_per_epoch="$steps" --set data.test.take=256 --set output.dir="$out/run$n" \
    --summary "$out/launch$n.json" >"$out/log$n" 2>&1 || { echo "launch failed:"; tail -20 "$out/log$n"; exit 1; }
  python3 - "$out/launch$n.json" "$n" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["tasks"]
chief = s["worker:0"]
n = int(sys.argv[2])
rate = chief["train_samples_per_sec"]
print(f"{n:<8} {64 * n:<10} {rate:<14.0f} {chief['comm_wait_share']:<16.3f} {rate / n:.0f}")
PY
done
