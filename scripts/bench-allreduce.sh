#!/usr/bin/env bash
# All-reduce benchmark (rerunnable): dtrain's Gloo communicator
# (`dtrain bench allreduce`) beside plain Gloo (bench/gloo_allreduce_reference) and,
# when PyTorch is installed for /usr/bin/python3, torch.distributed's gloo backend
# (bench/torch_allreduce.py), all with N local processes, the same sizes and the
# same nccl-tests definitions (algbw = bytes / time, busbw = algbw * 2(n-1)/n).
# The three run alternately R times; the table shows each one's median busbw and
# dtrain's ratio to plain Gloo (the goal: >= 0.95 at 16 MiB and up).
# Usage: scripts/bench-allreduce.sh [--workers N] [--sizes 4K:64M] [--repeats R] [--iterations I]
set -euo pipefail
cd "$(dirname "$0")/.."

workers=2 sizes=4K:64M repeats=3 iterations=20
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --iterations) iterations="$2"; shift 2 ;;
    *) echo "usage: $0 [--workers N] [--sizes 4K:64M] [--repeats R] [--iterations I]" >&2; exit 2 ;;
  esac
done
[ -x build/dtrain ] && [ -x build/bench/gloo_allreduce_reference ] || bash scripts/build.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
have_torch=0
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null && have_torch=1

for r in $(seq "$repeats"); do
  # Gloo's ring by name: `auto` would reduce through shared memory on one machine.
  timeout 600 build/dtrain bench allreduce --workers "$workers" --sizes "$sizes" --iterations "$iterations" \
    --communication ring --json \
    2>/dev/null | sed "s/^/dtrain $r /" >>"$out/all"  # JSON lines only on stdout
  timeout 600 build/bench/gloo_allreduce_reference --size "$workers" --sizes "$sizes" --iters "$iterations" \
    | sed -n 's/^[^{]*{/{/p' | sed "s/^/gloo $r /" >>"$out/all"
  if [ "$have_torch" = 1 ]; then
    timeout 600 /usr/bin/python3 bench/torch_allreduce.py --workers "$workers" --sizes "$sizes" --iterations "$iterations" \
      | sed "s/^/torch $r /" >>"$out/all"
  fi
done

python3 - "$out/all" "$workers" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    who, _, text = line.split(" ", 2)
    j = json.loads(text)
    if "setup" in j:  # dtrain's Gloo set-up line
        continue
    rows.setdefault(j["bytes"], {}).setdefault(who, []).append(j)
print(f"all-reduce, {sys.argv[2]} local processes, float32 sum; median of runs; bandwidths in GB/s")
print(f"{'bytes':>10} {'dtrain busbw':>13} {'gloo busbw':>11} {'torch busbw':>12} {'dtrain/gloo':>12} {'correct':>8}")
for size in sorted(rows):
    r = rows[size]
    med = lambda who: statistics.median(x["busbw_gbps"] for x in r[who]) if who in r else float("nan")
    ok = all(x.get("correct", True) for x in r.get("dtrain", []))
    ratio = med("dtrain") / med("gloo") if "gloo" in r and med("gloo") > 0 else float("nan")
    print(f"{size:>10} {med('dtrain'):>13.3f} {med('gloo'):>11.3f} {med('torch'):>12.3f} {ratio:>12.2f} {str(ok):>8}")
PY
