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
    # A failed run is a result too (the full mesh runs out of ports first): its
    # first error line goes in the table.
    timeout 600 build/dtrain bench allreduce --workers "$n" --communication ring --sizes 4K --iterations 3 \
      --warmup 1 --connections "$mode" --json >"$out/$n-$mode" 2>"$out/$n-$mode.err" ||
      { grep -m1 "its last error:" "$out/$n-$mode.err" || grep -m1 "dtrain: error:" "$out/$n-$mode.err" || tail -1 "$out/$n-$mode.err"; } >"$out/$n-$mode.failed"
  done
done

python3 - "$out" "$tasks" <<'PY'
import json, sys
out, tasks = sys.argv[1], sys.argv[2].split(",")
def read(n, mode):
    try:
        failed = open(f"{out}/{n}-{mode}.failed").read().strip()
        return None, failed
    except FileNotFoundError:
        pass
    lines = [json.loads(l) for l in open(f"{out}/{n}-{mode}") if l.startswith("{")]
    return next(l for l in lines if "setup" in l), next(l for l in lines if "bytes" in l)
print("Gloo set-up, N local worker processes (real tasks); neighbours: rank +- 2^i; full mesh: every pair")
print(f"{'tasks':>6} {'conn nbrs':>10} {'conn mesh':>10} {'per task':>9} {'setup nbrs (s)':>15} "
      f"{'setup mesh (s)':>15} {'mesh/nbrs':>10} {'4K ar nbrs (ms)':>16} {'4K ar mesh (ms)':>16}")
failures = []
for n in tasks:
    (sn, an), (sm, am) = read(n, "neighbours"), read(n, "full-mesh")
    cell = lambda s, key, fmt: format(s[key], fmt) if s else "failed"
    ar = lambda s, a: format(a["time_us"] / 1000, ".1f") if s else "failed"
    ratio = (format(sm["connect_seconds_max"] / sn["connect_seconds_max"], ".1f")
             if sn and sm and sn["connect_seconds_max"] > 0 else "-")
    per = f"{sn['connections_per_rank_max'] if sn else '-'}/{sm['connections_per_rank_max'] if sm else '-'}"
    print(f"{n:>6} {cell(sn, 'connections', 'd'):>10} {cell(sm, 'connections', 'd'):>10} {per:>9} "
          f"{cell(sn, 'connect_seconds_max', '.3f'):>15} {cell(sm, 'connect_seconds_max', '.3f'):>15} {ratio:>10} "
          f"{ar(sn, an):>16} {ar(sm, am):>16}")
    for mode, s, why in (("neighbours", sn, an), ("full mesh", sm, am)):
        if not s:
            failures.append(f"{n} tasks, {mode}: {why}")
for f in failures:
    print("failed:", f)
sys.exit(1 if any("neighbours" in f for f in failures) else 0)
PY
