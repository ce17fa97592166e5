#!/usr/bin/env bash
# ZeRO-1 benchmark (rerunnable): optimizer-state bytes per task and samples/s of
# the whole job, multi_worker_mirrored with and without
# strategy.shard_optimizer_state, N = 1, 2 and 4 workers (`dtrain launch`, every
# process on this machine's cores, one compute thread each), in one run.
# The job: Fashion-MNIST through an MLP with two wide Dense layers (784 -> 1024
# -> 1024 -> 10, 1.86 M params, Adam: two slots per param), a global batch of 256
# (256 / N per worker), the same steps everywhere.
# Prints one table row per run: optimizer_state_bytes of each task (from the
# launch summary), samples/s, the sharded/unsharded ratios, and the step breakdown.
# Usage: scripts/bench-zero.sh [--steps S (60)] [--build-dir DIR (build)] [--workers "1 2 4"]
set -euo pipefail
cd "$(dirname "$0")/.."

steps=60 build_dir=build workers_list="1 2 4"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --workers) workers_list="$2"; shift 2 ;;
    *) echo "usage: $0 [--steps S] [--build-dir DIR] [--workers \"1 2 4\"]" >&2; exit 2 ;;
  esac
done
dtrain="$build_dir/dtrain"
[ -x "$dtrain" ] || { echo "bench-zero: no $dtrain (build it: cmake --build $build_dir --target dtrain)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The job: the shipped MLP's data with wider layers and Adam.
python3 - "$out/job.json" <<'PY'
import json, sys
job = json.load(open("configs/fashion_mnist_mlp.json"))
job["model"]["layers"] = [{"type": "Flatten"},
                          {"type": "Dense", "units": 1024, "activation": "relu"},
                          {"type": "Dense", "units": 1024, "activation": "relu"},
                          {"type": "Dense", "units": 10}]
job["optimizer"] = {"type": "adam", "learning_rate": 0.001}
job["strategy"] = {"type": "multi_worker_mirrored"}
json.dump(job, open(sys.argv[1], "w"), indent=1)
PY

# run N SHARD: one launch; prints its table row.
run() {
  local n="$1" shard="$2" name="n$1_$2"
  timeout 900 "$dtrain" launch --workers "$n" --threads 1 --config "$out/job.json" \
    --set strategy.shard_optimizer_state="$shard" --set train.epochs=1 --set train.steps_per_epoch="$steps" \
    --set train.batch_size_per_replica=$((256 / n)) --set data.train.take=$((256 * steps)) \
    --set data.test.take=256 --set output.dir="$out/$name" --summary "$out/$name.json" \
    >"$out/$name.log" 2>&1 || { echo "$name failed:"; tail -20 "$out/$name.log"; exit 1; }
  python3 - "$out/$name.json" "$n" "$shard" <<'PY'
import json, sys
tasks = json.load(open(sys.argv[1]))["tasks"]
chief = tasks["worker:0"]
bytes_ = [t["optimizer_state_bytes"] for _, t in sorted(tasks.items())]
ms = dict(chief["step_ms_parts"], step=chief["step_ms"])
mib = " ".join(f"{b / 2**20:.2f}" for b in bytes_)
print(f"{sys.argv[2]:>2} {sys.argv[3]:>7} {bytes_[0]:>12} {mib:>24} {chief['train_samples_per_sec']:>10.0f}  "
      f"(step {ms['step']:.1f} ms: compute {ms['compute']:.1f}, gradient wait {ms['gradient_wait']:.1f}, "
      f"update {ms['update']:.1f})")
PY
}

echo "== ZeRO-1: MLP 784-1024-1024-10 (Adam), global batch 256, $steps steps, $(nproc) cores, 1 thread per worker"
printf "%2s %7s %12s %24s %10s\n" N sharded "bytes/task0" "MiB per task" samples/s
rows=$out/rows.txt
for n in $workers_list; do
  for shard in false true; do run "$n" "$shard" | tee -a "$rows"; done
done
python3 - "$rows" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows[(int(f[0]), f[1])] = (int(f[2]), float(f[3 + int(f[0])]))
print("== sharded / unsharded, per N: optimizer state bytes of task 0, samples/s")
for n in sorted({k[0] for k in rows}):
    if (n, "false") in rows and (n, "true") in rows:
        (b0, s0), (b1, s1) = rows[(n, "false")], rows[(n, "true")]
        print(f"N={n}: state {b1 / b0:.3f} (1/N = {1 / n:.3f}), samples/s {s1 / s0:.3f}")
PY
