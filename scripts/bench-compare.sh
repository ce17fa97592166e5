#!/usr/bin/env bash
# Before/after benchmark (rerunnable): two dtrain binaries, e.g. the previous
# commit's and this build's, measured alternately in one run on this machine, so
# a change can be shown to keep training and all-reduce speed "within noise":
#   - `bench train` samples/s for the Fashion-MNIST MLP (batch 128) and CNN
#     (batch 64), 2 threads;
#   - `bench allreduce` bus bandwidth with 2 local workers (64K to 16M).
# Each pair runs R times, A then B; the table shows medians and B/A.
# Usage: scripts/bench-compare.sh OLD_DTRAIN [NEW_DTRAIN (build/dtrain)] [--repeats R]
#   Build the old binary from a worktree: git worktree add /tmp/old HEAD~1 &&
#   cmake -S /tmp/old -B /tmp/old/build -DDTRAIN_BUILD_TESTS=OFF && cmake --build /tmp/old/build --target dtrain
set -euo pipefail
cd "$(dirname "$0")/.."

old="" new=build/dtrain repeats=5
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats="$2"; shift 2 ;;
    -*) echo "usage: $0 OLD_DTRAIN [NEW_DTRAIN] [--repeats R]" >&2; exit 2 ;;
    *) if [ -z "$old" ]; then old="$1"; else new="$1"; fi; shift ;;
  esac
done
[ -n "$old" ] || { echo "usage: $0 OLD_DTRAIN [NEW_DTRAIN] [--repeats R]" >&2; exit 2; }
[ -x "$old" ] && [ -x "$new" ] || { echo "$0: $old or $new is not an executable" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for r in $(seq "$repeats"); do
  for who in old new; do
    bin=$old; [ $who = new ] && bin=$new
    timeout 300 "$bin" bench train --config configs/fashion_mnist_mlp.json --batch 128 --threads 2 --steps 200 --json \
      | sed "s/^/$who mlp /" >>"$out/all"
    timeout 300 "$bin" bench train --config configs/fashion_mnist_cnn.json --batch 64 --threads 2 --steps 60 --json \
      | sed "s/^/$who cnn /" >>"$out/all"
    timeout 300 "$bin" bench allreduce --workers 2 --sizes 64K:16M --iterations 20 --json \
      | sed -n 's/^[^{]*{/{/p' | sed "s/^/$who allreduce /" >>"$out/all"
  done
done

python3 - "$out/all" "$repeats" <<'PY'
import json, statistics, sys
vals = {}
for line in open(sys.argv[1]):
    who, what, text = line.split(" ", 2)
    j = json.loads(text)
    if "setup" in j:  # bench allreduce's Gloo set-up line
        continue
    if what == "allreduce":
        key, v = f"allreduce {j['bytes']} B busbw (GB/s)", j["busbw_gbps"]
    else:
        key, v = f"bench train {what} (samples/s)", j["samples_per_sec"]
    vals.setdefault(key, {}).setdefault(who, []).append(v)
print(f"median of {sys.argv[2]} alternating runs; ratio = new / old")
print(f"{'measure':<36} {'old':>12} {'new':>12} {'ratio':>7}")
for key in vals:
    o, n = statistics.median(vals[key]["old"]), statistics.median(vals[key]["new"])
    print(f"{key:<36} {o:>12.3f} {n:>12.3f} {n / o if o else float('nan'):>7.3f}")
PY
