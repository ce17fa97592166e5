#!/usr/bin/env bash
# Rendezvous at scale (rerunnable), issue 38: `dtrain bench rendezvous` (the
# chief's real store against N simulated tasks, each a real ClusterSession in a
# worker process) beside PyTorch's TCPStore from PyPI (its default server, N
# clients doing the same join/wait/roster calls: bench/torch_tcpstore_reference.py,
# in the venv scripts/torch-venv.sh makes), in one run, for each N. Both start
# their clients at once once every process is ready, and stop the clock when
# the last one is past the barrier. A few milliseconds at small N vary from run
# to run: each N below 1,000 runs --repeats times (5) for both, and the table
# shows the medians (larger N once: TCPStore takes minutes at 4,096).
# Usage: scripts/bench-rendezvous.sh [--tasks 8,64,512,4096] [--repeats 5] [--skip-torch]
set -euo pipefail
cd "$(dirname "$0")/.."

tasks=8,64,512,4096 repeats=5 skip_torch=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tasks) tasks="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --skip-torch) skip_torch=1; shift ;;
    *) echo "usage: $0 [--tasks 8,64,512,4096] [--repeats 5] [--skip-torch]" >&2; exit 2 ;;
  esac
done
case "$repeats" in ''|*[!0-9]*|0) echo "bench-rendezvous: --repeats takes a count of 1 or more" >&2; exit 2 ;; esac
# Each N below 1,000 repeated: "8,8,8,8,8,64,...".
runs=$(python3 -c 'import sys; print(",".join(",".join([n] * (int(sys.argv[2]) if int(n) < 1000 else 1))
                                            for n in sys.argv[1].split(",")))' "$tasks" "$repeats")
[ -x build/dtrain ] || bash scripts/build.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

timeout 1800 build/dtrain bench rendezvous --tasks "$runs" --json >"$out/dtrain" 2>"$out/dtrain.err" || {
  cat "$out/dtrain.err" >&2
  exit 1
}
if [ "$skip_torch" = 0 ]; then
  py=$(bash scripts/torch-venv.sh)
  # Its clients wait up to 30 min: at 4,096 clients here TCPStore took about 7 min
  # (its connections wait on reverse-DNS lookups; see the reference's header).
  timeout 3000 "$py" bench/torch_tcpstore_reference.py --tasks "$runs" --timeout 1800 \
    2>"$out/torch.err" >"$out/torch" || {
    echo "bench-rendezvous: the TCPStore reference failed; dtrain's results:" >&2
    cat "$out/dtrain" >&2
    grep -v '^\[W' "$out/torch.err" | tail -5 >&2
    exit 1
  }
else
  : >"$out/torch"
fi

python3 - "$out/dtrain" "$out/torch" <<'PY'
import json, os, sys
from collections import defaultdict


def medians(path):
    """Per N, the run with the median barrier time (the whole row of that run)."""
    runs = defaultdict(list)
    for j in map(json.loads, open(path)):
        runs[j["tasks"]].append(j)
    out = {}
    for n, rows in runs.items():
        rows.sort(key=lambda j: j["barrier_seconds"])
        out[n] = dict(rows[len(rows) // 2], runs=len(rows))
    return out


dtrain = medians(sys.argv[1])
torch = medians(sys.argv[2])
print(f"# rendezvous to the barrier, {os.cpu_count()} cores; dtrain: 2 authenticated connections and heartbeats per task; "
      "TCPStore: 1 connection per client; the median of `runs` runs at each N")
print("# %6s %4s %11s %10s %11s %10s %9s %9s | %11s %12s %8s" % (
    "tasks", "runs", "dtrain(s)", "requests", "requests/s", "cpu/round", "detect", "named", "tcpstore(s)",
    "connected(s)", "speedup"))
for n, d in sorted(dtrain.items()):
    t = torch.get(n)
    tt = "%11.4f %12.4f %7.1fx" % (t["barrier_seconds"], t["last_connected_seconds"],
                                    t["barrier_seconds"] / d["barrier_seconds"]) if t else "%11s %12s %8s" % ("-", "-", "-")
    print("  %6d %4d %11.4f %10d %11.0f %8.1fms %8.3fs %9s | %s" % (
        n, d["runs"], d["barrier_seconds"], d["barrier_requests"], d["requests_per_second"],
        d["server_cpu_us_per_heartbeat_round"] / 1000, d["detect_seconds"],
        "%d/%d" % (d["named_by"], d["survivors"]), tt))
print("# cpu/round: the chief's store thread per heartbeat round (every task once); detect: SIGKILL of one task to "
      "the last other task naming it (heartbeat every 1 s)")
PY
