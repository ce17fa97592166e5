#!/usr/bin/env bash
# Grid benchmark (rerunnable): the step time of the shipped MLP (Fashion-MNIST)
# as 4 tasks on this machine, laid out three ways, under two dtrain binaries in
# one run (a build before a change and one after it):
#   data_parallel   multi_worker_mirrored over 4 tasks: the reference
#   data_ring       the same over Gloo's ring (strategy.communication ring), as
#                   across machines: the gradient buckets as views of the arena
#   data_x_tensor   2 copies x tensor_parallel 2 (the 2 x 2 grid)
#   pipe_x_data     pipeline of 2 stages x 2 copies
# Each row: the chief's mean step time and its parts (launch summary), and the
# after/before ratio. `dtrain launch --threads 1`: every task one compute thread.
# Usage: scripts/bench-grid.sh [--before DTRAIN] [--after DTRAIN (build/dtrain)]
#                              [--steps S (60)] [--repeat R (2): runs of each, the best kept]
set -euo pipefail
cd "$(dirname "$0")/.."

before="" after=build/dtrain steps=60 repeat=2
while [ $# -gt 0 ]; do
  case "$1" in
    --before) before="$2"; shift 2 ;;
    --after) after="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    *) echo "usage: $0 [--before DTRAIN] [--after DTRAIN] [--steps S] [--repeat R]" >&2; exit 2 ;;
  esac
done
for bin in $before $after; do
  [ -x "$bin" ] || { echo "bench-grid: no $bin (build it: cmake --build build --target dtrain)" >&2; exit 1; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

layout_args() {
  case "$1" in
    data_parallel) echo "--set strategy.type=multi_worker_mirrored" ;;
    data_ring) echo "--set strategy.type=multi_worker_mirrored --set strategy.communication=ring" ;;
    data_x_tensor) echo "--set strategy.type=multi_worker_mirrored --set strategy.tensor_parallel=2" ;;
    pipe_x_data) echo "--set strategy.type=pipeline --set strategy.stages=[\"dense_1\"]" ;;
  esac
}

# run BIN LAYOUT NAME: one launch; prints "step_ms compute wait update" of the chief.
run() {
  local bin="$1" layout="$2" name="$3"
  # shellcheck disable=SC2046
  timeout 900 "$bin" launch --workers 4 --threads 1 --config configs/fashion_mnist_mlp.json $(layout_args "$layout") \
    --set train.epochs=1 --set train.steps_per_epoch="$steps" --set train.batch_size_per_replica=64 \
    --set data.train.take=$((256 * steps)) --set data.test.take=256 --set checkpoint.every_epochs=0 \
    --set output.dir="$out/$name" --summary "$out/$name.json" >"$out/$name.log" 2>&1 ||
    { echo "bench-grid: $name failed:" >&2; tail -20 "$out/$name.log" >&2; exit 1; }
  python3 - "$out/$name.json" <<'PY'
import json, sys
chief = json.load(open(sys.argv[1]))["tasks"]["worker:0"]
parts = chief.get("step_ms_parts", {})
print(f"{chief['step_ms']:.2f} {parts.get('compute', 0):.2f} {parts.get('gradient_wait', 0):.2f} "
      f"{parts.get('update', 0):.2f}")
PY
}

# best BIN LAYOUT TAG: the fastest of `repeat` runs.
best() {
  local i line bestline=""
  for ((i = 0; i < repeat; ++i)); do
    line=$(run "$1" "$2" "$3_$2_$i")
    if [ -z "$bestline" ] || python3 -c "import sys; sys.exit(0 if float('${line%% *}') < float('${bestline%% *}') else 1)"; then
      bestline=$line
    fi
  done
  echo "$bestline"
}

cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "== grid benchmark: shipped MLP, 4 tasks, global batch 256, $steps steps, best of $repeat; $cpu, $(nproc) cores"
printf "%-14s %-7s %9s %9s %9s %9s %7s\n" layout binary "step ms" compute "grad wait" update ratio
for layout in data_parallel data_ring data_x_tensor pipe_x_data; do
  b=""
  if [ -n "$before" ]; then
    b=$(best "$before" "$layout" before)
    read -r s c w u <<<"$b"
    printf "%-14s %-7s %9s %9s %9s %9s %7s\n" "$layout" before "$s" "$c" "$w" "$u" ""
  fi
  a=$(best "$after" "$layout" after)
  read -r s c w u <<<"$a"
  ratio=""
  [ -n "$b" ] && ratio=$(python3 -c "print(f'{${b%% *} / ${a%% *}:.2f}x')")
  printf "%-14s %-7s %9s %9s %9s %9s %7s\n" "$layout" after "$s" "$c" "$w" "$u" "$ratio"
done
echo "(ratio: before's step time / after's: above 1 is faster after)"
