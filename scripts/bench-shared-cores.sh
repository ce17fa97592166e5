#!/usr/bin/env bash
# Tasks that share a machine's cores (rerunnable): the same multi_worker_mirrored
# job, N workers on this machine, started two ways:
#   launch  `dtrain launch --workers N` (which sizes every task's threads itself);
#   plain   N `dtrain run` processes, each given only its TF_CONFIG and the job
#           secret, as TensorFlow's tutorials start one worker per terminal: no
#           OMP_* variable, no --threads, no runtime.threads.
# Prints the job's training samples/s (the chief's summary) for both, and their
# ratio; the goal is plain >= 0.8x launch.
# Usage: scripts/bench-shared-cores.sh [--workers N (3)] [--steps S (200)] [--config FILE]
set -euo pipefail
cd "$(dirname "$0")/.."

workers=3 steps=200 config=configs/fashion_mnist_mlp.json
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    *) echo "usage: $0 [--workers N] [--steps S] [--config FILE]" >&2; exit 2 ;;
  esac
done
[ -x build/dtrain ] || bash scripts/build.sh
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
sets=(--set strategy.type=multi_worker_mirrored --set train.epochs=1 --set train.steps_per_epoch="$steps"
      --set train.batch_size_per_replica=64 --set data.test.take=256)

rate() {  # rate SUMMARY: the training samples/s in a run summary
  python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["train_samples_per_sec"]))' "$1"
}

timeout 900 build/dtrain launch --workers "$workers" --config "$config" "${sets[@]}" --set output.dir="$out/launch" \
  --summary "$out/launch.json" >"$out/launch.log" 2>&1 || { echo "launch failed:"; tail -20 "$out/launch.log"; exit 1; }
launch_rate=$(python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["tasks"]["worker:0"]["train_samples_per_sec"]))' "$out/launch.json")

# Free ports for the plain tasks: bound all at once (so they differ), then released.
ports=$(python3 - "$workers" <<'PY'
import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))
PY
)
cluster=$(python3 -c 'import json, sys; print(json.dumps({"worker": ["127.0.0.1:" + p for p in sys.argv[1:]]}))' $ports)
export DTRAIN_JOB_SECRET=$(openssl rand -hex 16)
unset OMP_NUM_THREADS OMP_WAIT_POLICY OMP_PROC_BIND GOMP_SPINCOUNT DTRAIN_LAUNCHED DTRAIN_JOB_ID DTRAIN_LISTEN_FD || true
pids=()
for i in $(seq 0 $((workers - 1))); do
  TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
    timeout 900 build/dtrain run --config "$config" "${sets[@]}" --set output.dir="$out/plain" \
      --summary "$out/plain$i.json" >"$out/plain$i.log" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "plain worker:$i failed:"; tail -20 "$out/plain$i.log"; exit 1; }
done
plain_rate=$(rate "$out/plain0.json")
threads=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("threads", "?"))' "$out/plain0.json")

echo "$workers workers of $(basename "$config") on $(nproc) cores, $steps steps, batch 64 per worker"
printf '%-44s %12s\n' "started by" "samples/s"
printf '%-44s %12s\n' "dtrain launch --workers $workers" "$launch_rate"
printf '%-44s %12s\n' "$workers plain dtrain run (no OMP_*, $threads thread(s) each)" "$plain_rate"
python3 -c 'import sys; print(f"plain / launch: {int(sys.argv[1]) / int(sys.argv[2]):.2f}x")' "$plain_rate" "$launch_rate"
