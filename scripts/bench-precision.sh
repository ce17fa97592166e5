#!/usr/bin/env bash
# Mixed precision on the CPU (rerunnable): training throughput of the shipped
# Fashion-MNIST CNN (configs/fashion_mnist_cnn.json, batch 64) in float32 and in
# train.precision mixed_bfloat16, against PyTorch 2.x from PyPI (the venv of
# scripts/torch-venv.sh) in float32 and under torch.autocast("cpu",
# dtype=torch.bfloat16) on the same model and batch (bench/torch_reference.py).
# The four are measured alternately, R times each, on one thread; the table shows
# medians and the ratios the issue asks for (dtrain bf16 / dtrain f32, dtrain
# bf16 / PyTorch autocast bf16), and which oneDNN instruction set ran.
#
# Usage: scripts/bench-precision.sh [--repeats R] [--threads T] [--steps N] [--no-torch]
set -euo pipefail
cd "$(dirname "$0")/.."

repeats=5 threads=1 steps=300 torch=1
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --no-torch) torch=0; shift ;;
    *) echo "usage: $0 [--repeats R] [--threads T] [--steps N] [--no-torch]" >&2; exit 2 ;;
  esac
done

[ -x build/dtrain ] || bash scripts/build.sh >&2
py=""
[ "$torch" = 1 ] && py=$(bash scripts/torch-venv.sh)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

for r in $(seq "$repeats"); do
  for precision in float32 mixed_bfloat16; do
    build/dtrain bench train --config configs/fashion_mnist_cnn.json --batch 64 --threads "$threads" \
      --steps "$steps" --warmup 30 --set "train.precision=$precision" --json | sed "s/^/dtrain $precision /" >>"$out"
  done
  if [ -n "$py" ]; then
    for autocast in off bfloat16; do
      "$py" bench/torch_reference.py --model cnn --batch 64 --threads "$threads" --steps $((steps / 3)) \
        --warmup 10 --autocast "$autocast" | sed "s/^/pytorch $autocast /" >>"$out"
    done
  fi
done

echo "dtrain: $(build/dtrain version | sed -n 2p)"
python3 - "$out" "$threads" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, mode, text = line.split(" ", 2)
    runs.setdefault((who, mode), []).append(json.loads(text)["samples_per_sec"])
med = {k: statistics.median(v) for k, v in runs.items()}
print(f"Fashion-MNIST CNN, batch 64, {sys.argv[2]} thread(s); median samples/s of {len(next(iter(runs.values())))} runs")
names = {("dtrain", "float32"): "dtrain float32", ("dtrain", "mixed_bfloat16"): "dtrain mixed_bfloat16",
         ("pytorch", "off"): "PyTorch float32", ("pytorch", "bfloat16"): "PyTorch autocast bfloat16"}
for key, name in names.items():
    if key in med:
        print(f"  {name:28s} {med[key]:10.0f}   (runs: {', '.join(f'{v:.0f}' for v in runs[key])})")
bf, f32 = med[("dtrain", "mixed_bfloat16")], med[("dtrain", "float32")]
print(f"  dtrain mixed_bfloat16 / dtrain float32:          {bf / f32:.2f}x")
if ("pytorch", "bfloat16") in med:
    print(f"  dtrain mixed_bfloat16 / PyTorch autocast bf16:   {bf / med[('pytorch', 'bfloat16')]:.2f}x")
    print(f"  dtrain float32 / PyTorch float32:                {f32 / med[('pytorch', 'off')]:.2f}x")
PY
