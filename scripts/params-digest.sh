#!/usr/bin/env bash
# Before/after parameter digests (rerunnable): the final params_sha256 of the
# jobs a refactoring must not change, for one dtrain binary. Run it with the old
# and the new binary and compare the lines: identical digests mean the change
# left every trained parameter bit-for-bit as it was.
#   mlp       configs/fashion_mnist_mlp.json, 1 epoch, 2 threads
#   cnn       configs/fashion_mnist_cnn.json, 1 epoch, 2 threads
#   mwms      the multi-worker CNN, 2 local workers (launch), 1 epoch
#   ps_sync   the MLP under parameter_server mode sync: chief + 2 workers + 1 ps
#   pipeline  the MLP as a 2-stage pipeline (stage 2 from dense_1), 2 workers
# and every other strategy and parallel layout on the MLP, 40 steps each (the
# grid issue's list: the same digests before and after one grid, one gradient path):
#   mirrored, central   mirrored / central_storage with 2 replicas
#   zero1, zero2, zero3 multi_worker_mirrored sharding optimizer state / gradients / parameters, 2 workers
#   tensor              tensor_parallel 2, 2 workers
#   data_tensor         2 copies x tensor_parallel 2, 4 workers
#   pipe_data           2 stages x 2 copies, 4 workers
#   grid                2 copies x 2 stages x tensor_parallel 2, 8 workers
#   gpt_pipe_tensor     the shipped GPT (gpt_fortunes.json), 2 stages x tensor 2, 4 workers, 10 steps
# Usage: scripts/params-digest.sh [DTRAIN (build/dtrain)] [NAME ...: only those]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build/dtrain}")
shift || true
only=" $* "
[ -x "$bin" ] || { echo "$0: $bin is not an executable" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
epoch1=(--set train.epochs=1)
steps40=(--set train.steps_per_epoch=40)
wanted() { [ "$only" = "  " ] || [[ "$only" == *" $1 "* ]]; }

digest_run() {  # NAME CONFIG ARGS...: one task, its summary's params_sha256
  local name=$1 config=$2; shift 2
  wanted "$name" || return 0
  # (each its own output.dir: a second run into one is refused)
  "$bin" run --config "$config" "${epoch1[@]}" --set "output.dir=$out/$name" --threads 2 --summary "$out/$name.json" \
    "$@" >"$out/$name.log" 2>&1 \
    || { echo "$name: failed"; tail -5 "$out/$name.log"; return 1; }
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2].ljust(10), d["params_sha256"])' "$out/$name.json" "$name"
}

digest_launch() {  # NAME CONFIG ARGS...: a local cluster, the chief's (or worker 0's) params_sha256
  local name=$1 config=$2; shift 2
  wanted "$name" || return 0
  "$bin" launch --config "$config" "${epoch1[@]}" --set "output.dir=$out/$name" --threads 1 \
    --summary "$out/$name.json" "$@" >"$out/$name.log" 2>&1 \
    || { echo "$name: failed"; tail -5 "$out/$name.log"; return 1; }
  python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
tasks = json.load(open(sys.argv[1]))["tasks"]
digests = sorted({t["params_sha256"] for t in tasks.values() if t and t.get("params_sha256")})
print(f"{sys.argv[2]:<10} {' '.join(digests)}")
PY
}

digest_run mlp configs/fashion_mnist_mlp.json
digest_run cnn configs/fashion_mnist_cnn.json
digest_launch mwms configs/fashion_mnist_cnn_multiworker.json --workers 2
digest_launch ps_sync configs/fashion_mnist_mlp.json --workers 2 --chief --ps 1 \
  --set strategy.type=parameter_server --set strategy.mode=sync
digest_launch pipeline configs/fashion_mnist_mlp.json --workers 2 \
  --set strategy.type=pipeline --set 'strategy.stages=["dense_1"]'
mlp=configs/fashion_mnist_mlp.json
digest_run mirrored $mlp "${steps40[@]}" --set strategy.type=mirrored --set strategy.replicas=2
digest_run central $mlp "${steps40[@]}" --set strategy.type=central_storage --set strategy.replicas=2
mwms=(--set strategy.type=multi_worker_mirrored)
digest_launch zero1 $mlp --workers 2 "${steps40[@]}" "${mwms[@]}" --set strategy.shard=optimizer_state
digest_launch zero2 $mlp --workers 2 "${steps40[@]}" "${mwms[@]}" --set strategy.shard=gradients
digest_launch zero3 $mlp --workers 2 "${steps40[@]}" "${mwms[@]}" --set strategy.shard=parameters
digest_launch tensor $mlp --workers 2 "${steps40[@]}" "${mwms[@]}" --set strategy.tensor_parallel=2
digest_launch data_tensor $mlp --workers 4 "${steps40[@]}" "${mwms[@]}" --set strategy.tensor_parallel=2
pipe=(--set strategy.type=pipeline --set 'strategy.stages=["dense_1"]')
digest_launch pipe_data $mlp --workers 4 "${steps40[@]}" "${pipe[@]}"
digest_launch grid $mlp --workers 8 "${steps40[@]}" "${pipe[@]}" --set strategy.tensor_parallel=2
digest_launch gpt_pipe_tensor configs/gpt_fortunes.json --workers 4 --set train.steps_per_epoch=10 \
  --set strategy.type=pipeline --set strategy.stages=auto --set strategy.tensor_parallel=2
