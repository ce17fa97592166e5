#!/usr/bin/env bash
# dtrain's GPT (configs/gpt_fortunes.json) against the same model in PyTorch
# from PyPI (bench/torch_gpt_reference.py, in the venv scripts/torch-venv.sh
# makes), on the CPU, in one run:
#
#   1. training throughput (tokens/s) at each thread count: `dtrain bench
#      train` and PyTorch eager alternately, R times each, medians and the
#      ratio dtrain/pytorch; PyTorch under torch.compile too; then in bfloat16:
#      dtrain's mixed_bfloat16 against PyTorch eager under
#      torch.autocast(bfloat16), and against PyTorch's float32 eager;
#   2. the validation loss after the same number of steps (default 1,500, the
#      shipped config's): `dtrain run` and PyTorch eager, each timed; then
#      mixed_bfloat16 against autocast (--no-bf16 skips the bfloat16 parts);
#   3. causal attention alone (forward + backward) at sequence 128, 512 and
#      2048: `dtrain bench attention` and PyTorch's scaled_dot_product_attention,
#      time and the peak memory the op adds;
#   4. 2 workers (multi_worker_mirrored, `dtrain launch`, 1 thread each, the
#      global batch 32 split) against 1 worker with 1 thread: tokens/s.
#
# Usage: scripts/bench-transformer.sh [options]
#   --repeats R        throughput measurements per (framework, threads) (default 3)
#   --threads "1 2"    thread counts (default "1 2")
#   --steps N          timed steps per throughput measurement (default 60)
#   --loss-steps N     steps of the loss comparison (default 1500; 0 skips it)
#   --no-compile       skip torch.compile
#   --no-bf16          skip the bfloat16 rows (mixed_bfloat16, autocast)
#   --out FILE         raw JSON lines (default build/bench-transformer.jsonl)
#
# A busy machine slows multi-thread runs of both frameworks (OpenMP spin-waits);
# the footer prints the load average. Needs PyPI the first time (the venv).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

repeats=3
threads_list="1 2"
steps=60
loss_steps=1500
compile=1
bf16=1
out="build/bench-transformer.jsonl"
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats=$2; shift 2 ;;
    --threads) threads_list=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --loss-steps) loss_steps=$2; shift 2 ;;
    --no-compile) compile=0; shift ;;
    --no-bf16) bf16=0; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench-transformer: unknown option $1" >&2; exit 2 ;;
  esac
done

config=configs/gpt_fortunes.json
dtrain=build/dtrain
[ -x "$dtrain" ] || bash scripts/build.sh
py=$(bash scripts/torch-venv.sh)
ref=bench/torch_gpt_reference.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$out"

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
field() { "$py" -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }

echo "== 1. training throughput (batch 32, sequence 128), $steps timed steps, median of $repeats"
printf "%-8s %14s %14s %8s\n" threads "dtrain tok/s" "torch tok/s" ratio
for t in $threads_list; do
  d=(); p=()
  for _ in $(seq "$repeats"); do
    j=$("$dtrain" bench train --config "$config" --steps "$steps" --warmup 5 --threads "$t" --json 2>/dev/null | tail -1)
    echo "$j" >> "$out"
    d+=("$(echo "$j" | field samples_per_sec | awk '{print $1 * 128}')")
    j=$("$py" "$ref" train --threads "$t" --steps "$steps" --warmup 5 2>/dev/null | tail -1)
    echo "$j" >> "$out"
    p+=("$(echo "$j" | field tokens_per_sec)")
  done
  dm=$(printf "%s\n" "${d[@]}" | median); pm=$(printf "%s\n" "${p[@]}" | median)
  printf "%-8s %14.0f %14.0f %8.2f\n" "$t" "$dm" "$pm" "$(echo "$dm $pm" | awk '{print $1 / $2}')"
  if [ "$bf16" = 1 ]; then
    db=(); pb=()
    for _ in $(seq "$repeats"); do
      j=$("$dtrain" bench train --config "$config" --steps "$steps" --warmup 5 --threads "$t" \
        --set train.precision=mixed_bfloat16 --json 2>/dev/null | tail -1)
      echo "$j" >> "$out"
      db+=("$(echo "$j" | field samples_per_sec | awk '{print $1 * 128}')")
      j=$("$py" "$ref" train --threads "$t" --steps "$steps" --warmup 5 --autocast 2>/dev/null | tail -1)
      echo "$j" >> "$out"
      pb+=("$(echo "$j" | field tokens_per_sec)")
    done
    dbm=$(printf "%s\n" "${db[@]}" | median); pbm=$(printf "%s\n" "${pb[@]}" | median)
    printf "%-8s %14.0f %14.0f %8.2f   (dtrain mixed_bfloat16 / torch autocast bfloat16)\n" "$t" "$dbm" "$pbm" \
      "$(echo "$dbm $pbm" | awk '{print $1 / $2}')"
    printf "%-8s %14.0f %14.0f %8.2f   (dtrain mixed_bfloat16 / torch float32 eager)\n" "$t" "$dbm" "$pm" \
      "$(echo "$dbm $pm" | awk '{print $1 / $2}')"
  fi
  if [ "$compile" = 1 ]; then
    j=$("$py" "$ref" train --threads "$t" --steps "$steps" --warmup 10 --compile 2>/dev/null | tail -1) || j=""
    if [ -n "$j" ]; then
      echo "$j" >> "$out"
      c=$(echo "$j" | field tokens_per_sec)
      printf "%-8s %14s %14.0f %8.2f   (torch.compile)\n" "$t" "" "$c" "$(echo "$dm $c" | awk '{print $1 / $2}')"
    else
      echo "$t        torch.compile failed (see: $py $ref train --compile)"
    fi
  fi
done

if [ "$loss_steps" -gt 0 ]; then
  echo "== 2. validation loss after $loss_steps steps (2 threads)"
  epochs=$(( (loss_steps + 749) / 750 ))
  start=$(date +%s.%N)
  "$dtrain" run --config "$config" --threads 2 --set train.epochs=$epochs \
    --set train.steps_per_epoch=$(( loss_steps / epochs )) --set output.dir="$tmp/run" \
    --summary "$tmp/summary.json" > "$tmp/run.log" 2>&1
  dsec=$(echo "$start $(date +%s.%N)" | awk '{print $2 - $1}')
  dloss=$("$py" -c "import json; print(json.load(open('$tmp/summary.json'))['test_loss'])")
  grep -E "^Epoch|tokens/s" "$tmp/run.log" | tail -4
  j=$("$py" "$ref" train --threads 2 --steps "$loss_steps" --warmup 0 --eval 2>/dev/null | tail -1)
  echo "$j" >> "$out"
  ploss=$(echo "$j" | field val_loss); psec=$(echo "$j" | field seconds)
  printf "dtrain:  val loss %.4f nats/byte (%.3f bits/byte), %.0f s (run, evaluation included)\n" "$dloss" \
    "$(echo "$dloss" | awk '{print $1 / log(2)}')" "$dsec"
  printf "pytorch: val loss %.4f nats/byte, %.0f s (training steps only)\n" "$ploss" "$psec"
  printf "loss ratio dtrain/pytorch: %.4f\n" "$(echo "$dloss $ploss" | awk '{print $1 / $2}')"
  if [ "$bf16" = 1 ]; then
    start=$(date +%s.%N)
    "$dtrain" run --config "$config" --threads 2 --set train.epochs=$epochs \
      --set train.steps_per_epoch=$(( loss_steps / epochs )) --set output.dir="$tmp/run-bf16" \
      --set train.precision=mixed_bfloat16 --summary "$tmp/summary-bf16.json" > "$tmp/run-bf16.log" 2>&1
    dsec=$(echo "$start $(date +%s.%N)" | awk '{print $2 - $1}')
    dloss=$("$py" -c "import json; print(json.load(open('$tmp/summary-bf16.json'))['test_loss'])")
    j=$("$py" "$ref" train --threads 2 --steps "$loss_steps" --warmup 0 --eval --autocast 2>/dev/null | tail -1)
    echo "$j" >> "$out"
    ploss=$(echo "$j" | field val_loss); psec=$(echo "$j" | field seconds)
    printf "dtrain mixed_bfloat16:  val loss %.4f nats/byte, %.0f s (run, evaluation included)\n" "$dloss" "$dsec"
    printf "pytorch autocast bf16:  val loss %.4f nats/byte, %.0f s (training steps only)\n" "$ploss" "$psec"
    printf "loss ratio dtrain/pytorch (bfloat16): %.4f\n" "$(echo "$dloss $ploss" | awk '{print $1 / $2}')"
  fi
fi

echo "== 3. causal attention alone, forward + backward (batch 4, 4 heads of 32, 2 threads)"
printf "%-8s %12s %12s %14s %14s\n" seq "dtrain ms" "torch ms" "dtrain +MiB" "torch +MiB"
for s in 128 512 2048; do
  dj=$("$dtrain" bench attention --seq "$s" --batch 4 --heads 4 --head-dim 32 --threads 2 --steps 10 --json | tail -1)
  pj=$("$py" "$ref" attention --seq "$s" --batch 4 --heads 4 --head-dim 32 --threads 2 --steps 10 2>/dev/null | tail -1)
  echo "$dj" >> "$out"; echo "$pj" >> "$out"
  printf "%-8s %12.2f %12.2f %14.1f %14.1f\n" "$s" "$(echo "$dj" | field ms)" "$(echo "$pj" | field ms)" \
    "$(echo "$dj" | field peak_extra_mib)" "$(echo "$pj" | field peak_extra_mib)"
done

echo "== 4. multi_worker_mirrored: 2 workers x 1 thread against 1 worker x 1 thread (global batch 32)"
one=$("$dtrain" bench train --config "$config" --steps "$steps" --warmup 5 --threads 1 --json 2>/dev/null | tail -1 |
  field samples_per_sec)
"$dtrain" launch --workers 2 --threads 1 --config "$config" \
  --set strategy.type=multi_worker_mirrored --set train.batch_size_per_replica=16 --set train.epochs=1 \
  --set train.steps_per_epoch=$(( steps + 5 )) --set output.dir="$tmp/mwms" \
  --summary "$tmp/launch.json" > "$tmp/mwms.log" 2>&1 || true
two=$("$py" - "$tmp/launch.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rates = [t["train_samples_per_sec"] for t in s["tasks"].values() if isinstance(t, dict) and "train_samples_per_sec" in t]
print(sum(rates) / len(rates) if rates else 0)  # each task reports the global batch's rate
PY
)
printf "dtrain:  1 worker %.0f tokens/s; 2 workers %.0f tokens/s; scaling %.2f\n" "$(echo "$one" | awk '{print $1 * 128}')" \
  "$(echo "$two" | awk '{print $1 * 128}')" "$(echo "$two $one" | awk '{print ($2 > 0) ? $1 / $2 : 0}')"
p1=$("$py" "$ref" train --threads 1 --steps "$steps" --warmup 5 2>/dev/null | tail -1 | field tokens_per_sec)
j=$("$py" "$ref" ddp --ddp 2 --threads 1 --steps "$steps" --warmup 5 2>/dev/null | tail -1)
echo "$j" >> "$out"
p2=$(echo "$j" | field tokens_per_sec)
printf "pytorch: 1 process %.0f tokens/s; DDP 2 processes %.0f tokens/s; scaling %.2f\n" "$p1" "$p2" \
  "$(echo "$p2 $p1" | awk '{print $1 / $2}')"
printf "2 workers, dtrain / pytorch DDP: %.2f\n" "$(echo "$two $p2" | awk '{print $1 * 128 / $2}')"

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); raw results: $out"
