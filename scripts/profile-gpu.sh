#!/usr/bin/env bash
# Where dtrain's GPU step time goes: runs `dtrain bench train` on a GPU under
# Nsight Compute (ncu) and prints the time of every kernel of a window of
# steps after warm-up, summed per kernel name, largest first -- cuBLASLt and
# cuDNN kernels next to dtrain's own (their names start with
# dtrain::kernels::cuda::for_each_index<BodyName>).
#
# Usage: scripts/profile-gpu.sh --config FILE [--batch B] [--dtrain PATH]
# Needs ncu on PATH (the lent H100/H200 machines have it; on gVisor machines it
# cannot read counters). Uses a bundle (.gpu/, scripts/gpu-bundle.sh) when present.
set -euo pipefail
cd "$(dirname "$0")/.."
config=""
batch=""
dtrain="${DTRAIN_TEST_BINARY:-build/dtrain}"
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --dtrain) dtrain="$2"; shift 2 ;;
    *) echo "profile-gpu.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$config" ] || { echo "profile-gpu.sh: --config FILE is required" >&2; exit 2; }
if [ -d .gpu/bin ]; then
  source scripts/gpu-env.sh
  dtrain="$DTRAIN_TEST_BINARY"
fi
extra=()
[ -n "$batch" ] && extra=(--set "train.batch_size_per_replica=$batch")
csv=/tmp/dtrain-profile-gpu.csv
# Skip the warm-up's kernels (algorithm searches, first-shape setup), then
# profile the next 400 kernel launches.
ncu --csv --metrics gpu__time_duration.sum --launch-skip 600 --launch-count 400 \
    "$dtrain" bench train --config "$config" --set device=gpu "${extra[@]}" --warmup 20 --steps 40 >"$csv"
python3 - "$csv" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
name_i, metric_i, value_i = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
total = collections.Counter()
count = collections.Counter()
for r in rows[1:]:
    if r[metric_i] != "gpu__time_duration.sum":
        continue
    name = r[name_i][:110]
    total[name] += float(r[value_i].replace(",", ""))
    count[name] += 1
all_ns = sum(total.values())
print(f"{'share':>6} {'us total':>10} {'calls':>6}  kernel")
for name, ns in total.most_common(25):
    print(f"{100 * ns / all_ns:5.1f}% {ns / 1000:10.1f} {count[name]:6d}  {name}")
print(f"{len(total)} kernels, {all_ns / 1000:.1f} us of GPU time in the profiled window")
PY
