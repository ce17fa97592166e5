#!/usr/bin/env bash
# Gloo's set-up at N real tasks (rerunnable), issue 38: `dtrain bench allreduce`
# with N local worker processes (the launcher's cluster, Gloo's ring), once
# connecting only the neighbours dtrain's collectives need (rank +- 2^i, the
# default) and once Gloo's full mesh (--connections full-mesh), in one run. Prints,
# per N: connections in all and per task, the slowest task's set-up time, and a
# 4 KB all-reduce's time (the same ring either way).
# Usage: scripts/bench-gloo-setup.sh [--tasks 8,32,64,128]
set -euo pipefail
cd "$(dirname "$0")/.."

tasks=8,32,64,128
while [ $# -gt 0 ]; do
  case "$1" in
    --tasks) tasks="$2"; shift 2 ;;
    *) echo "usage: $0 [--tasks 8,32,64,128]" >&2; exit 2 ;;
  esac
done
[ -x build/dtrain ] || bash scripts/build.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for n in ${tasks//,/ }; do
  for mode in neighbours full-mesh; do
    timeout 600 build/dtrain bench allreduce --workers "$n" --communication ring --sizes 4K --iterations 3 \
      --warmup 1 --connections "$mode" --json >"$out/$n-$mode" 2>"$out/$n-$mode.err" || {
      echo "bench-gloo-setup: $n tasks, $mode failed:" >&2
      grep -v "^\[worker:[0-9]*\] dtrain: error: task .* was lost" "$out/$n-$mode.err" | tail -5 >&2
      exit 1
    }
  done
done

python3 - "$out" "$tasks" <<'PY'
import json, sys
out, tasks = sys.argv[1], sys.argv[2].split(",")
def read(n, mode):
    lines = [json.loads(l) for l in open(f"{out}/{n}-{mode}") if l.startswith("{")]
    setup = next(l for l in lines if "setup" in l)
    size = next(l for l in lines if "bytes" in l)
    return setup, size
print("Gloo set-up, N local worker processes (real tasks); neighbours: rank +- 2^i; full mesh: every pair")
print(f"{'tasks':>6} {'conn nbrs':>10} {'conn mesh':>10} {'per task':>9} {'setup nbrs (s)':>15} "
      f"{'setup mesh (s)':>15} {'mesh/nbrs':>10} {'4K ar nbrs (ms)':>16} {'4K ar mesh (ms)':>16}")
for n in tasks:
    (sn, an), (sm, am) = read(n, "neighbours"), read(n, "full-mesh")
    ratio = sm["connect_seconds_max"] / sn["connect_seconds_max"] if sn["connect_seconds_max"] > 0 else float("nan")
    print(f"{n:>6} {sn['connections']:>10} {sm['connections']:>10} "
          f"{str(sn['connections_per_rank_max']) + '/' + str(sm['connections_per_rank_max']):>9} "
          f"{sn['connect_seconds_max']:>15.3f} {sm['connect_seconds_max']:>15.3f} {ratio:>10.1f} "
          f"{an['time_us'] / 1000:>16.1f} {am['time_us'] / 1000:>16.1f}")
PY
