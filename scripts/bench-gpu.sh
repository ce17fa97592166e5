#!/usr/bin/env bash
# GPU training throughput of dtrain against PyTorch eager, on one GPU, and a
# per-layer profile of dtrain's steps.
#
# For each (model, batch) below, runs `dtrain bench train` and
# bench/torch_gpu_reference.py (the same model in PyTorch eager; see its
# docstring for what it does alike and what favours PyTorch) alternately,
# R times each, and prints the median samples/s of each and the ratio
# dtrain/pytorch. Both run on the same GPU in the same script run.
#
#   mlp     configs/fashion_mnist_mlp.json   batch 128, 256, 1024
#   cnn     configs/fashion_mnist_cnn.json   batch 128, 256, 1024
#   mlp4096 configs/bench_mlp_4096.json      batch 256, 1024
#   resnet32 configs/bench_resnet_32.json    batch 128, 256
#
# Usage: scripts/bench-gpu.sh [--dtrain PATH] [--repeats R] [--out FILE] [--quick]
#   --dtrain PATH  the dtrain binary (default build/dtrain, or $DTRAIN_TEST_BINARY)
#   --repeats R    measurements per (model, batch, framework); median taken (default 3)
#   --out FILE     raw JSON lines, one per measurement (default bench-gpu.jsonl)
#   --quick        fewer steps (a smoke run)
# PYTHON (default python3) must have PyTorch with CUDA.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

dtrain="${DTRAIN_TEST_BINARY:-build/dtrain}"
repeats=3
out="bench-gpu.jsonl"
scale=1
while [ $# -gt 0 ]; do
  case "$1" in
    --dtrain) dtrain="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --quick) scale=5; shift ;;
    *) echo "bench-gpu.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
python="${PYTHON:-python3}"
: >"$out"
if [ -d .gpu/bin ]; then
  source scripts/gpu-env.sh  # a bundle from scripts/gpu-bundle.sh
  dtrain="$DTRAIN_TEST_BINARY"
fi

# model config batch steps
cases=(
  "mlp configs/fashion_mnist_mlp.json 128 400"
  "mlp configs/fashion_mnist_mlp.json 256 400"
  "mlp configs/fashion_mnist_mlp.json 1024 200"
  "cnn configs/fashion_mnist_cnn.json 128 300"
  "cnn configs/fashion_mnist_cnn.json 256 200"
  "cnn configs/fashion_mnist_cnn.json 1024 100"
  "mlp4096 configs/bench_mlp_4096.json 256 100"
  "mlp4096 configs/bench_mlp_4096.json 1024 50"
  "resnet32 configs/bench_resnet_32.json 128 100"
  "resnet32 configs/bench_resnet_32.json 256 60"
)

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
rate() { sed -n 's/.*"samples_per_sec":[ ]*\([0-9.e+]*\).*/\1/p' | tail -1; }

printf "%-9s %6s %14s %14s %8s\n" model batch "dtrain (s/s)" "pytorch (s/s)" ratio
for c in "${cases[@]}"; do
  read -r model config batch steps <<<"$c"
  steps=$(( steps / scale > 5 ? steps / scale : 5 ))
  d_rates=() ; t_rates=()
  for r in $(seq "$repeats"); do
    d=$("$dtrain" bench train --config "$config" --set "train.batch_size_per_replica=$batch" --set device=gpu \
         --steps "$steps" --warmup 10 --json 2>/dev/null | tail -1)
    echo "{\"framework\": \"dtrain\", \"model\": \"$model\", \"result\": $d}" >>"$out"
    d_rates+=("$(echo "$d" | rate)")
    t=$("$python" bench/torch_gpu_reference.py --model "$model" --batch "$batch" --steps "$steps" --warmup 10 | tail -1)
    echo "$t" >>"$out"
    t_rates+=("$(echo "$t" | rate)")
  done
  dm=$(printf "%s\n" "${d_rates[@]}" | median)
  tm=$(printf "%s\n" "${t_rates[@]}" | median)
  printf "%-9s %6s %14.0f %14.0f %7.2fx\n" "$model" "$batch" "$dm" "$tm" "$(echo "$dm $tm" | awk '{print $1/$2}')"
done
echo
echo "Where dtrain's step time goes (dtrain bench train --profile: per layer, the GPU waited for around each):"
for c in "mlp configs/fashion_mnist_mlp.json 1024" "cnn configs/fashion_mnist_cnn.json 256" \
         "mlp4096 configs/bench_mlp_4096.json 1024" "resnet32 configs/bench_resnet_32.json 256"; do
  read -r model config batch <<<"$c"
  echo "== $model, batch $batch"
  "$dtrain" bench train --config "$config" --set "train.batch_size_per_replica=$batch" --set device=gpu \
    --steps 5 --warmup 10 --profile 20 2>/dev/null | sed -n '/^Profile/,$p'
done
echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo unknown);" \
     "PyTorch $("$python" -c 'import torch; print(torch.__version__)');" \
     "medians of $repeats alternating runs; raw results in $out"
