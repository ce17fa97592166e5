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
# PYTHON (default python3) must have PyTorch with CUDA. A run that fails is
# reported (its exit code and last line; the whole output in the log) and the
# others go on; the exit status is then 1. Each run has a time limit (RUN_LIMIT_S,
# default 120 s). The raw results and bench-gpu.log go to $OUT when it is set.
# The whole default table takes longer than one device-tool command (600 s):
# there, run --quick --repeats 1, or scripts/gpu-check.sh's short bench step.
set -uo pipefail  # no -e: a failed run is reported, the rest go on
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

dtrain="${DTRAIN_TEST_BINARY:-build/dtrain}"
repeats=3
out="${OUT:+$OUT/}bench-gpu.jsonl"
log="${OUT:+$OUT/}bench-gpu.log"
limit="${RUN_LIMIT_S:-120}"
failures=0
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
[ -z "${OUT:-}" ] || mkdir -p "$OUT"
: >"$out"
: >"$log"
: >"$log.failed"
if [ -f .gpu/bin.tar.xz ]; then
  source scripts/gpu-env.sh || exit 1  # a bundle from scripts/gpu-bundle.sh
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
# measure WHAT COMMAND...: runs it under the time limit, its output to the log;
# prints its last line, or reports the failure (and counts it) and prints nothing.
measure() {
  local what=$1 o rc
  shift
  o=$(timeout -k 5 "$limit" "$@" 2>&1)
  rc=$?
  printf '== %s: %s (exit %s)\n%s\n' "$what" "$*" "$rc" "$o" >>"$log"
  if [ "$rc" -ne 0 ]; then
    echo "bench-gpu.sh: $what failed (exit $rc$([ "$rc" -eq 124 ] && echo ": over ${limit}s")): $(printf '%s' "$o" | tail -1)" >&2
    echo "$what" >>"$log.failed"  # (measure runs in a subshell: counted through a file)
    return 0
  fi
  printf '%s\n' "$o" | tail -1
}

printf "%-9s %6s %14s %14s %8s\n" model batch "dtrain (s/s)" "pytorch (s/s)" ratio
for c in "${cases[@]}"; do
  read -r model config batch steps <<<"$c"
  steps=$(( steps / scale > 5 ? steps / scale : 5 ))
  d_rates=() ; t_rates=()
  for r in $(seq "$repeats"); do
    d=$(measure "dtrain $model batch $batch" "$dtrain" bench train --config "$config" \
         --set "train.batch_size_per_replica=$batch" --set device=gpu --steps "$steps" --warmup 10 --json)
    [ -z "$d" ] || echo "{\"framework\": \"dtrain\", \"model\": \"$model\", \"result\": $d}" >>"$out"
    [ -z "$d" ] || d_rates+=("$(echo "$d" | rate)")
    t=$(measure "pytorch $model batch $batch" "$python" bench/torch_gpu_reference.py --model "$model" --batch "$batch" \
         --steps "$steps" --warmup 10)
    [ -z "$t" ] || echo "$t" >>"$out"
    [ -z "$t" ] || t_rates+=("$(echo "$t" | rate)")
  done
  dm=$( [ ${#d_rates[@]} -gt 0 ] && printf "%s\n" "${d_rates[@]}" | median || echo 0)
  tm=$( [ ${#t_rates[@]} -gt 0 ] && printf "%s\n" "${t_rates[@]}" | median || echo 0)
  printf "%-9s %6s %14.0f %14.0f %7.2fx\n" "$model" "$batch" "${dm:-0}" "${tm:-0}" \
    "$(echo "${dm:-0} ${tm:-0}" | awk '{print ($2 > 0) ? $1/$2 : 0}')"
done
echo
echo "Where dtrain's step time goes (dtrain bench train --profile: per layer, the GPU waited for around each):"
for c in "mlp configs/fashion_mnist_mlp.json 1024" "cnn configs/fashion_mnist_cnn.json 256" \
         "mlp4096 configs/bench_mlp_4096.json 1024" "resnet32 configs/bench_resnet_32.json 256"; do
  read -r model config batch <<<"$c"
  echo "== $model, batch $batch"
  timeout -k 5 "$limit" "$dtrain" bench train --config "$config" --set "train.batch_size_per_replica=$batch" \
    --set device=gpu --steps 5 --warmup 10 --profile 20 >"$log.profile" 2>&1
  rc=$?
  cat "$log.profile" >>"$log"
  if [ "$rc" -ne 0 ]; then
    echo "bench-gpu.sh: the profile of $model failed (exit $rc): $(tail -1 "$log.profile")" >&2
    failures=$((failures + 1))
  fi
  sed -n '/^Profile/,$p' "$log.profile"
  rm -f "$log.profile"
done
echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo unknown);" \
     "PyTorch $("$python" -c 'import torch; print(torch.__version__)');" \
     "medians of $repeats alternating runs; raw results in $out, outputs in $log"
failures=$(( failures + $(wc -l <"$log.failed") ))
rm -f "$log.failed"
if [ "$failures" -gt 0 ]; then
  echo "bench-gpu.sh: $failures run(s) failed (above; their output in $log)" >&2
  exit 1
fi
