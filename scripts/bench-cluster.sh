#!/usr/bin/env bash
# Cluster runtime benchmark (rerunnable):
#  1. start-up: `dtrain launch` of N local tasks (default 8) on a tiny job, R times;
#     the launcher prints how long it took until every task was past the agreement
#     barrier; prints each run's figure and the median.
#  2. failure detection: two tasks started by hand (no launcher in between), one
#     killed with SIGKILL mid-training; measures the time from the kill until the
#     survivor has exited (it must exit with code 4, naming the lost task). Done
#     once killing a worker and once killing the chief.
# Usage: scripts/bench-cluster.sh [--tasks N] [--repeats R]
set -euo pipefail
cd "$(dirname "$0")/.."

tasks=8
repeats=5
while [ $# -gt 0 ]; do
  case "$1" in
    --tasks) tasks="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    *) echo "usage: $0 [--tasks N] [--repeats R]" >&2; exit 2 ;;
  esac
done

[ -x build/dtrain ] || bash scripts/build.sh
dtrain=build/dtrain
job=configs/tiny_synthetic.json
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== start-up: dtrain launch --workers $tasks (time until all tasks are past the agreement barrier)"
times=()
for i in $(seq "$repeats"); do
  timeout 120 "$dtrain" launch --workers "$tasks" --config "$job" --set strategy.type=multi_worker_mirrored --set output.dir="$out/launch$i" \
    >"$out/launch$i.log" 2>&1 || { echo "launch failed:"; tail -20 "$out/launch$i.log"; exit 1; }
  t=$(grep -o 'past the agreement barrier in [0-9.]* s' "$out/launch$i.log" | grep -o '[0-9.]*' | head -1)
  echo "  run $i: $t s"
  times+=("$t")
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "  median: %s s over %d runs\n", a[int((NR+1)/2)], NR}'

# Two tasks on free ports; kills one at ~2 s and times the survivor's exit.
detect() {
  local victim="$1"
  local ports
  ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')
  set -- $ports
  local cluster="{\"worker\": [\"127.0.0.1:$1\", \"127.0.0.1:$2\"]}"
  export DTRAIN_JOB_SECRET=bench-secret
  local pids=()
  for i in 0 1; do
    # No `timeout` wrapper: the kill below must hit dtrain itself, not a wrapper.
    TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
      "$dtrain" run --config "$job" --set strategy.type=multi_worker_mirrored --set train.epochs=100000 --set data.train.count=4096 \
      >"$out/detect$i.log" 2>&1 &
    pids+=($!)
  done
  # A watchdog, so the benchmark never hangs if a survivor fails to notice.
  ( sleep 60; kill -9 "${pids[@]}" 2>/dev/null ) &
  local watchdog=$!
  sleep 2
  local kill_index=$victim survivor=$((1 - victim))
  local t0 t1 code=0
  t0=$(date +%s.%N)
  kill -9 "${pids[$kill_index]}"
  wait "${pids[$survivor]}" || code=$?
  t1=$(date +%s.%N)
  wait "${pids[$kill_index]}" 2>/dev/null || true
  kill "$watchdog" 2>/dev/null || true
  local name="worker:$kill_index"
  [ "$kill_index" = 0 ] && name="worker:0 (the chief)"
  printf '  kill -9 %-22s survivor exited with code %d after %.3f s\n' "$name" "$code" "$(echo "$t1 - $t0" | bc)"
  grep -h 'error:' "$out/detect$survivor.log" | sed 's/^/    /' | head -2
}

echo "== failure detection: kill -9 one of two tasks, time until the other has exited"
detect 1
detect 0
