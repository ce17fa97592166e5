#!/usr/bin/env bash
# Parameter-server benchmark (rerunnable), all on this machine's cores, one
# compute thread per task:
#  1. transport: `dtrain bench ps` push/pull time and MB/s per ps, 2 workers with
#     1 ps and with 2 ps (nccl-tests-style tables).
#  2. training: the Fashion-MNIST MLP (configs/fashion_mnist_mlp.json, batch 64 per
#     worker) under `dtrain launch`, samples/s of the whole job (the chief's
#     summary) and test accuracy, for
#       parameter_server async: chief + 2 workers + 1 ps, and + 2 ps
#       parameter_server sync:  chief + 2 workers + 1 ps
#       multi_worker_mirrored:  2 workers (the all-reduce reference)
#     and TensorFlow's own ParameterServerStrategy (tf-keras Model.fit, chief +
#     2 workers + 1 ps, same MLP, batch and threads: bench/tf_ps_reference.py in
#     the venv scripts/tf-venv.sh makes from PyPI). Prints the ratios the issue
#     asks for: dtrain async / TF, and async / multi_worker_mirrored.
# Usage: scripts/bench-ps.sh [--epochs E (8)] [--tf-epochs E (= --epochs)] [--sizes 4K:64M] [--no-tf]
set -euo pipefail
cd "$(dirname "$0")/.."

epochs=8
tf_epochs=""
sizes=4K:64M
run_tf=1
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) epochs="$2"; shift 2 ;;
    --tf-epochs) tf_epochs="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --no-tf) run_tf=0; shift ;;
    *) echo "usage: $0 [--epochs E] [--tf-epochs E] [--sizes LIST] [--no-tf]" >&2; exit 2 ;;
  esac
done

[ -n "$tf_epochs" ] || tf_epochs=$epochs
[ -x build/dtrain ] || bash scripts/build.sh
dtrain=build/dtrain
job=configs/fashion_mnist_mlp.json
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== transport: dtrain bench ps --workers 2 --ps 1 --sizes $sizes"
"$dtrain" bench ps --workers 2 --ps 1 --sizes "$sizes" 2>/dev/null | sed 's/^\[worker:0\] //'
echo "== transport: dtrain bench ps --workers 2 --ps 2 --sizes $sizes"
"$dtrain" bench ps --workers 2 --ps 2 --sizes "$sizes" 2>/dev/null | sed 's/^\[worker:0\] //'

# train NAME CHIEF_TASK LAUNCH_ARGS... -- JOB_ARGS...: one training run; prints and
# records "NAME samples/s accuracy".
train() {
  local name="$1" chief="$2"
  shift 2
  local launch_args=() job_args=()
  while [ "$1" != "--" ]; do launch_args+=("$1"); shift; done
  shift
  job_args=("$@")
  timeout 900 "$dtrain" launch "${launch_args[@]}" --threads 1 --summary "$out/$name.json" --config "$job" \
    --set train.epochs="$epochs" --set train.batch_size_per_replica=64 "${job_args[@]}" \
    >"$out/$name.log" 2>&1 || { echo "$name failed:"; tail -20 "$out/$name.log"; exit 1; }
  python3 - "$out/$name.json" "$chief" "$name" <<'PY' | tee -a "$out/results.txt"
import json, sys
s = json.load(open(sys.argv[1]))["tasks"][sys.argv[2]]
print(f"{sys.argv[3]} {s['train_samples_per_sec']:.0f} {s['test_accuracy']:.4f}")
PY
}

echo "== training: Fashion-MNIST MLP, $epochs epochs, batch 64 per worker, 1 thread per task (name samples/s test_accuracy)"
train ps_async_1ps chief:0 --workers 2 --chief --ps 1 -- --set strategy.type=parameter_server
train ps_sync_1ps chief:0 --workers 2 --chief --ps 1 -- --set strategy.type=parameter_server --set strategy.mode=sync
train ps_async_2ps chief:0 --workers 2 --chief --ps 2 -- --set strategy.type=parameter_server \
  --set 'strategy.variable_partitioner={"type": "min_size", "min_shard_bytes": 65536}'
train mwm_2w worker:0 --workers 2 -- --set strategy.type=multi_worker_mirrored

if [ "$run_tf" = 1 ]; then
  py=$(bash scripts/tf-venv.sh)
  echo "== TensorFlow ParameterServerStrategy (tf-keras Model.fit), chief + 2 workers + 1 ps, $tf_epochs epochs"
  timeout 1800 "$py" bench/tf_ps_reference.py --workers 2 --ps 1 --epochs "$tf_epochs" --batch 64 --threads 1 --json \
    >"$out/tf.log" 2>&1 || { echo "TF reference failed:"; tail -20 "$out/tf.log"; exit 1; }
  python3 - "$out/tf.log" <<'PY' | tee -a "$out/results.txt"
import json, sys
line = [l for l in open(sys.argv[1]) if l.startswith("{")][-1]
r = json.loads(line)
print(f"tf_ps_async_1ps {r['samples_per_sec']:.0f} {r['test_accuracy']:.4f}")
PY
fi

echo "== ratios"
python3 - "$out/results.txt" <<'PY'
import sys
rows = {n: (float(s), float(a)) for n, s, a in (l.split() for l in open(sys.argv[1]))}
def ratio(a, b, what):
    if a in rows and b in rows:
        print(f"  {what}: {rows[a][0] / rows[b][0]:.2f}x ({rows[a][0]:.0f} / {rows[b][0]:.0f} samples/s)")
ratio("ps_async_1ps", "tf_ps_async_1ps", "dtrain async (chief + 2 workers + 1 ps) / TensorFlow PSS, same cluster")
ratio("ps_async_1ps", "mwm_2w", "dtrain async (chief + 2 workers + 1 ps) / multi_worker_mirrored with 2 workers")
ratio("ps_sync_1ps", "mwm_2w", "dtrain sync / multi_worker_mirrored")
ratio("ps_async_2ps", "ps_async_1ps", "dtrain async, 2 ps / 1 ps")
PY
