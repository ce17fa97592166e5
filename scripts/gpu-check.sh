#!/usr/bin/env bash
# The GPU check that fits one device-tool call: runs on a lent GPU machine from the
# bundle (.gpu/, made by scripts/gpu-bundle.sh here and carried there), most
# valuable step first, each under its own `timeout`, in at most 9.5 minutes in all
# (GPU_CHECK_BUDGET_S, default 560 s: a step that no longer fits in what is left
# gets the rest, or is skipped). A failing step is recorded and the next one runs.
#
#   step          at most  what it runs
#   unpack           (15)  source scripts/gpu-env.sh: unpack the bundle, find CUDA's libraries
#   version           15   dtrain version, dtrain devices, nvidia-smi, which cuBLASLt/cuDNN/NCCL load
#   bench-gpt2       240   GPT-2 small's shape (configs/gpt2_small.json, batch 8, sequence 1024): a
#                          peak-GEMM probe (torch.mm bf16 and fp32), then alternating dtrain float32,
#                          PyTorch eager float32, dtrain mixed_bfloat16, PyTorch eager bf16 autocast
#                          with flash SDPA, torch.compile bf16 (AdamW, same shapes): tokens/s, MFU,
#                          peak memory (bench/gpt2_summary.py's table), then dtrain bench train
#                          --profile in mixed_bfloat16: where the step's time goes
#   ops               60   test_gpu_ops: every op on the GPU against the CPU
#   layers            40   test_gpu_layers: a ResNet-style model's outputs and gradients against the CPU
#   train-mlp         30   dtrain run, the shipped MLP on the GPU: 4 epochs of 8192 images (256 steps)
#   train-cnn         35   the same for the shipped CNN, 3 epochs (192 steps)
#   precision         35   the MLP in mixed_bfloat16 and in mixed_float16 (loss scaling)
#   train-tests       60   test_gpu_training: the CNN along the CPU's loss curve; a checkpoint resumes
#   nccl              45   test_gpu_nccl: the NCCL communicator with one rank (two-GPU cases skip)
#   nccl-train        30   test_gpu_nccl_training: one task training with communication nccl
#   pair-reducer      45   two processes on the one GPU, each its own NCCL_HOSTID, P2P and SHM off:
#                          multi_worker_mirrored with the gradients on NCCL (NCCL's socket transport)
#   pair-pipeline     45   the same two processes as a 2-stage pipeline whose links are NCCL
#   quad-pipeline     45   four such processes as 2 stages x 2 copies: the copies' gradients in
#                          the bucketed all-reduce through host copies (gradient_sync.h)
#   bench             45   dtrain bench train against PyTorch eager (bench/torch_gpu_reference.py),
#                          the MLP and the CNN at batch 256; skipped without PyTorch on CUDA
#   gpt-tests         60   test_gpu_training's tiny GPT: the CPU's losses on the GPU (dropout too),
#                          mixed_bfloat16 against float32
#   train-gpt         90   dtrain run configs/gpt_fortunes.json on the GPU (1,500 steps, as shipped):
#                          the validation loss (at most 1.85 nats per byte) and tokens/s
#   bench-gpt         60   the GPT's training tokens/s against PyTorch eager on the same GPU
#                          (bench/torch_gpt_reference.py --device cuda), and attention alone at
#                          sequence 128, 512 and 2048 (and 2048 on the row kernels) against
#                          scaled_dot_product_attention: time and the memory it adds
#                 (sum 980: the budget ends it; the longer benchmarks: scripts/bench-gpu.sh)
#
# Writes two files to $OUT (the device tool's folder that comes back; ./gpu-check-out
# when OUT is unset): gpu-check.tsv (step, status pass/fail/skip/timeout, seconds,
# a one-line detail) and gpu-check.log (every step's whole output), then prints the
# table. Exits 1 when a step failed or timed out, else 0 (skips included: without a
# GPU every GPU step reports skip).
#
# From a build tree instead of a bundle (a machine with dtrain's build dependencies
# and a CUDA build in build/): the same steps with build/dtrain and build/tests/gpu.
# GPU_CHECK_DEVICE=cpu rehearses the dtrain steps on the CPU (device cpu, Gloo
# instead of NCCL, no accuracy bar on cuda:0): a check of this script on a machine
# without a GPU; the test binaries still report skip there. GPU_CHECK_STEPS="a b"
# runs only the steps named.
# Usage: bash scripts/gpu-check.sh
#   with the device tool: run(carry [".gpu"], command "bash scripts/gpu-check.sh", timeout_s 600)
set -uo pipefail  # no -e: each step's failure is recorded, and the next step runs
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

out="${OUT:-$repo_root/gpu-check-out}"
mkdir -p "$out"
log="$out/gpu-check.log"
summary="$out/gpu-check.tsv"
budget="${GPU_CHECK_BUDGET_S:-560}"
: >"$log"
printf 'step\tstatus\tseconds\tdetail\n' >"$summary"
work="$(mktemp -d /tmp/gpu-check.XXXXXX)"
export GPU_CHECK_WORK="$work"
t_start=$SECONDS

# record STEP STATUS SECONDS DETAIL: one row of the summary (and the log).
record() {
  local detail
  detail="$(printf '%s' "$4" | tr '\t\n' '  ' | cut -c1-400)"
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$detail" >>"$summary"
  printf '=== %s: %s in %ss: %s\n\n' "$1" "$2" "$3" "$detail" >>"$log"
  printf '%-14s %-8s %4ss  %s\n' "$1" "$2" "$3" "$detail"
}

# step NAME CAP FUNCTION: runs the exported bash FUNCTION under `timeout CAP` (its
# whole process group), output to the log. Status: timeout (exit 124/137), skip
# (exit 77, or exit 0 with a DTRAIN-SKIPPED line other than "needs two GPUs"), pass
# (exit 0), else fail. Detail: the function's last "DETAIL: " line, else Catch's
# closing line, else the output's last line.
step() {
  local name=$1 cap=$2 fn=$3 left rc t0 o detail status
  # GPU_CHECK_STEPS="version bench-gpt2": only those steps (a rehearsal of one step)
  if [ -n "${GPU_CHECK_STEPS:-}" ] && [[ " $GPU_CHECK_STEPS " != *" $name "* ]]; then return; fi
  left=$(( budget - (SECONDS - t_start) ))
  if [ "$left" -lt 10 ]; then
    record "$name" skip 0 "not started: the ${budget}s budget is spent"
    return
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  o="$work/$name.out"
  echo "=== $name (at most ${cap}s, started $(date -u +%H:%M:%S))" >>"$log"
  t0=$SECONDS
  timeout -k 5 "$cap" bash -c "$fn" >"$o" 2>&1 </dev/null
  rc=$?
  cat "$o" >>"$log"
  detail="$(grep -a '^DETAIL: ' "$o" | tail -1 | sed 's/^DETAIL: //')"
  [ -n "$detail" ] || detail="$(grep -a -E '^(All tests passed|test cases:)' "$o" | tail -1)"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=timeout
    detail="stopped after ${cap}s; last line: $(grep -v '^\s*$' "$o" | tail -1)"
  elif [ "$rc" -eq 77 ] || { [ "$rc" -eq 0 ] && grep DTRAIN-SKIPPED "$o" | grep -qv 'needs two GPUs'; }; then
    status=skip
    if [ "$rc" -eq 77 ]; then
      detail="$(grep -m1 '^SKIP: ' "$o" | sed 's/^SKIP: //')"
    else
      detail="$(grep DTRAIN-SKIPPED "$o" | grep -v 'needs two GPUs' | sort | uniq -c | sort -rn | head -1 |
        sed 's/^ *\([0-9]*\) DTRAIN-SKIPPED: /\1x /'); $detail"
    fi
  elif [ "$rc" -eq 0 ] && grep -q '^No tests ran' "$o"; then
    status=fail  # a test filter that matched nothing (a binary older than the script)
    detail="no test case matched the step's filter"
  elif [ "$rc" -eq 0 ]; then
    status=pass
    local two
    two=$(grep -c 'DTRAIN-SKIPPED: needs two GPUs' "$o")
    [ "$two" -gt 0 ] && detail="$detail; $two two-GPU case(s) skipped"
  else
    status=fail
    detail="exit $rc: $(grep -m1 -E 'FAILED|REQUIRE|error|Error|not found' "$o" || grep -v '^\s*$' "$o" | tail -1)"
  fi
  [ -n "$detail" ] || detail="$(grep -v '^\s*$' "$o" | tail -1)"
  record "$name" "$status" $(( SECONDS - t0 )) "$detail"
}

# ---- where the binaries, libraries and data come from
echo "=== unpack ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname))" >>"$log"
t0=$SECONDS
if [ -f .gpu/bin.tar.xz ]; then
  if source scripts/gpu-env.sh >>"$log" 2>&1; then
    record unpack pass $(( SECONDS - t0 )) "bundle: $(sed -n 's/^commit: //p' .gpu/MANIFEST.txt); data cut=$DTRAIN_GPU_DATA_CUT; LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  else
    record unpack fail $(( SECONDS - t0 )) "scripts/gpu-env.sh could not unpack .gpu (log)"
  fi
elif [ -x build/dtrain ]; then
  export DTRAIN_TEST_BINARY="$repo_root/build/dtrain" DTRAIN_TEST_SOURCE_DIR="$repo_root"
  export DTRAIN_GPU_DATA=/usr/share/datasets/fashion-mnist
  dtrain_gpu_test_dir="$repo_root/build/tests/gpu"
  record unpack pass 0 "no bundle: the build tree's binaries (build/)"
else
  record unpack fail 0 "neither a bundle (.gpu/bin.tar.xz: scripts/gpu-bundle.sh) nor build/dtrain"
fi
export DTRAIN_TEST_BINARY="${DTRAIN_TEST_BINARY:-/nonexistent/dtrain}"
export GPU_CHECK_TESTS="${dtrain_gpu_test_dir:-/nonexistent}"
export DTRAIN_GPU_DATA="${DTRAIN_GPU_DATA:-/usr/share/datasets/fashion-mnist}"
export PYTHON="${PYTHON:-python3}"
export GPU_CHECK_DEVICE="${GPU_CHECK_DEVICE:-gpu}"
# Whether a GPU is usable, as dtrain sees it: the GPU steps skip without one.
gpu_report="$("$DTRAIN_TEST_BINARY" devices 2>&1)"
if [ $? -eq 0 ] && ! printf '%s' "$gpu_report" | grep -qi 'no usable GPU'; then
  export GPU_CHECK_GPU=1
else
  export GPU_CHECK_GPU=0
  GPU_CHECK_NO_GPU="$(printf '%s\n' "$gpu_report" | grep -i -m1 'usable GPU\|error\|not found' || printf '%s' "$gpu_report" | head -1)"
  export GPU_CHECK_NO_GPU
fi

# ---- the steps (each runs in its own bash: what it needs is exported)
need_gpu() {
  if [ "$GPU_CHECK_GPU" != 1 ] && [ "$GPU_CHECK_DEVICE" = gpu ]; then
    echo "SKIP: $GPU_CHECK_NO_GPU"
    exit 77
  fi
}

# make_job BASE OUT KEY=JSON...: BASE (a configs/ file) with each dotted KEY set to
# the JSON value (a plain string where it is no JSON), data read from $DTRAIN_GPU_DATA.
make_job() {
  "$PYTHON" - "$@" <<'PY'
import json, os, sys
base, out, sets = sys.argv[1], sys.argv[2], sys.argv[3:]
job = json.load(open(base))
data = os.environ["DTRAIN_GPU_DATA"]
for split, prefix in (("train", "train"), ("test", "t10k")):
    job["data"][split]["images"] = f"{data}/{prefix}-images-idx3-ubyte.gz"
    job["data"][split]["labels"] = f"{data}/{prefix}-labels-idx1-ubyte.gz"
job["data"]["shuffle_buffer"] = 8192
for s in sets:
    key, value = s.split("=", 1)
    try:
        value = json.loads(value)
    except ValueError:
        pass
    node = job
    *path, last = key.split(".")
    for k in path:
        node = node.setdefault(k, {})
    node[last] = value
json.dump(job, open(out, "w"), indent=1)
PY
}

# summary_field FILE KEY[.KEY...]: one value of a JSON summary ("" when absent).
summary_field() {
  "$PYTHON" -c '
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v.get(k, "") if isinstance(v, dict) else ""
print(v)' "$1" "$2" 2>/dev/null
}

# train_run NAME BASE MIN_ACCURACY KEY=JSON...: dtrain run of the job on the GPU;
# fails below MIN_ACCURACY or off cuda:0.
train_run() {
  local name=$1 base=$2 min=$3
  shift 3
  local dir="$GPU_CHECK_WORK/$name"
  mkdir -p "$dir"
  make_job "$base" "$dir/job.json" "device=$GPU_CHECK_DEVICE" "output.dir=$dir/out" "output.overwrite=true" "$@" || return 1
  "$DTRAIN_TEST_BINARY" run --config "$dir/job.json" --summary "$dir/summary.json" 2>&1 | tee "$dir/run.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "DETAIL: $name: dtrain run exited $rc: $(grep -v '^\s*$' "$dir/run.log" | tail -1)"; return 1; }
  local device accuracy rate
  device=$(summary_field "$dir/summary.json" device)
  accuracy=$(summary_field "$dir/summary.json" test_accuracy)
  rate=$(summary_field "$dir/summary.json" train_samples_per_sec)
  echo "DETAIL: $name on $device: test accuracy $accuracy, $(printf '%.0f' "${rate:-0}") samples/s"
  [ "$device" = cuda:0 ] || [ "$GPU_CHECK_DEVICE" = cpu ] || return 1
  awk -v a="$accuracy" -v m="$min" 'BEGIN {exit !(a >= m)}' || { echo "DETAIL: $name: test accuracy $accuracy < $min"; return 1; }
  [ -z "${want_in_log:-}" ] || grep -q "$want_in_log" "$dir/run.log" ||
    { echo "DETAIL: $name: the log does not say '$want_in_log'"; return 1; }
}

s_version() {
  "$DTRAIN_TEST_BINARY" version || { echo "DETAIL: dtrain does not start: $(ldd "$DTRAIN_TEST_BINARY" | grep 'not found' | paste -sd' ')"; exit 1; }
  "$DTRAIN_TEST_BINARY" devices
  if command -v nvidia-smi >/dev/null; then nvidia-smi; else echo "nvidia-smi: not on the PATH"; fi
  echo "-- CUDA's libraries as dtrain loads them:"
  ldd "$DTRAIN_TEST_BINARY" | grep -E 'cublas|cudnn|nccl|not found'
  local gpu libs
  gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
  libs=$(ldd "$DTRAIN_TEST_BINARY" | awk '/cublasLt|cudnn\.|nccl/ {print $3}' | paste -sd' ')
  echo "DETAIL: GPU: ${gpu:-none}; $("$DTRAIN_TEST_BINARY" version | sed -n "2p;4p" | paste -sd";"); $libs"
  [ "$GPU_CHECK_GPU" = 1 ] || { echo "SKIP: $GPU_CHECK_NO_GPU (dtrain starts: $("$DTRAIN_TEST_BINARY" version | head -1))"; exit 77; }
}
s_ops() { "$GPU_CHECK_TESTS/test_gpu_ops" --durations yes; }
s_layers() { "$GPU_CHECK_TESTS/test_gpu_layers" --durations yes; }
s_train_mlp() { need_gpu; train_run mlp configs/fashion_mnist_mlp.json 0.75 train.epochs=4; }
s_train_cnn() { need_gpu; train_run cnn configs/fashion_mnist_cnn.json 0.75 train.epochs=3; }
s_precision() {
  need_gpu
  local status=0
  local says="compute in bfloat16"  # (dtrain says so on a GPU only)
  [ "$GPU_CHECK_DEVICE" = gpu ] || says=""
  want_in_log="$says" train_run mlp-bf16 configs/fashion_mnist_mlp.json 0.7 train.epochs=2 \
    train.precision=mixed_bfloat16 || status=1
  if [ "$GPU_CHECK_DEVICE" = gpu ]; then  # (a rehearsal leaves it out: oneDNN 2.6 has no float16 on most CPUs)
    want_in_log="compute in float16" train_run mlp-f16 configs/fashion_mnist_mlp.json 0.7 train.epochs=2 \
      train.precision=mixed_float16 || status=1
  fi
  local scale
  scale=$(summary_field "$GPU_CHECK_WORK/mlp-f16/summary.json" loss_scale)
  echo "DETAIL: bf16 $(summary_field "$GPU_CHECK_WORK/mlp-bf16/summary.json" test_accuracy)," \
       "f16 $(summary_field "$GPU_CHECK_WORK/mlp-f16/summary.json" test_accuracy) (loss scale ${scale:-none})$([ $status = 0 ] || echo '; see the log')"
  return $status
}
s_train_tests() {
  need_gpu
  "$GPU_CHECK_TESTS/test_gpu_training" --durations yes \
    "a CNN trains on the GPU along the CPU*,a checkpoint saved on the GPU resumes*"
}
s_nccl() { "$GPU_CHECK_TESTS/test_gpu_nccl" --durations yes; }
s_nccl_train() { "$GPU_CHECK_TESTS/test_gpu_nccl_training" --durations yes "one task on one GPU*"; }

# pair NAME KEY=JSON...: two `dtrain run` tasks of a TF_CONFIG cluster on loopback,
# both on cuda:0, each with its own NCCL_HOSTID (NCCL then takes them for two hosts
# and lets them share the GPU), NCCL's P2P and shared-memory paths off (the socket
# transport over lo carries the data). Both must exit 0 with the same parameters.
pair() {
  local name=$1
  shift
  local dir="$GPU_CHECK_WORK/$name"
  mkdir -p "$dir"
  make_job configs/fashion_mnist_mlp.json "$dir/job.json" "device=$GPU_CHECK_DEVICE" "output.dir=$dir/out" output.overwrite=true \
    data.train.take=2048 data.test.take=1000 train.epochs=2 train.log_every_steps=4 "$@" || return 1
  local n=${pair_tasks:-2} port=$(( 20000 + RANDOM % 20000 )) addresses="" i
  for ((i = 0; i < n; ++i)); do addresses+="${addresses:+, }\"127.0.0.1:$(( port + i ))\""; done
  local cluster="{\"worker\": [$addresses]}"
  export DTRAIN_JOB_SECRET
  DTRAIN_JOB_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  local pids=()
  for ((i = 0; i < n; ++i)); do
    TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": $i}}" LOCAL_RANK=0 \
    NCCL_HOSTID="dtrain-check-$i" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 \
    NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN \
      "$DTRAIN_TEST_BINARY" run --config "$dir/job.json" --summary "$dir/summary-$i.json" >"$dir/task-$i.log" 2>&1 &
    pids+=($!)
  done
  local rcs=() status=0 failed=0
  for ((i = 0; i < n; ++i)); do
    wait "${pids[$i]}"
    rcs+=($?)
    [ "${rcs[$i]}" = 0 ] || failed=1
  done
  for ((i = 0; i < n; ++i)); do echo "--- task $i (exit ${rcs[$i]})"; cat "$dir/task-$i.log"; done
  if [ "$failed" = 1 ]; then
    echo "DETAIL: exits ${rcs[*]}: $(grep -h -m1 -i -E 'error|NCCL WARN' "$dir"/task-*.log | head -1)"
    return 1
  fi
  local h0 hi
  h0=$(summary_field "$dir/summary-0.json" params_sha256)
  pair_detail="world size $(summary_field "$dir/summary-0.json" world_size), test accuracy $(summary_field "$dir/summary-0.json" test_accuracy)"
  for ((i = 1; i < n; ++i)); do
    hi=$(summary_field "$dir/summary-$i.json" params_sha256)
    if [ "${pair_want_same:-1}" = 1 ] && [ "$h0" != "$hi" ]; then
      echo "DETAIL: tasks 0 and $i end with different parameters ($h0 vs $hi)"
      return 1
    fi
  done
  return $status
}
s_pair_reducer() {
  need_gpu
  pair pair-reducer strategy.type=multi_worker_mirrored "strategy.communication=$(comm_engine)" strategy.bytes_per_pack=16384 ||
    return 1
  echo "DETAIL: gradients on $(comm_engine) between two processes on one $GPU_CHECK_DEVICE: same parameters; $pair_detail"
}
s_pair_pipeline() {
  need_gpu
  # The stages hold different layers: their parameters differ by design.
  pair_want_same=0 pair pair-pipeline \
    "strategy={\"type\": \"pipeline\", \"stages\": [\"dense_1\"], \"micro_batches\": 4, \"communication\": \"$(comm_engine)\"}" ||
    return 1
  local l0 l1
  l0=$(summary_field "$GPU_CHECK_WORK/pair-pipeline/summary-0.json" pipeline.links)
  l1=$(summary_field "$GPU_CHECK_WORK/pair-pipeline/summary-1.json" pipeline.links)
  echo "DETAIL: pipeline links: $l0 / $l1; $pair_detail"
  [ "$l0" = "$(links_wanted)" ] && [ "$l1" = "$(links_wanted)" ]
}
s_quad_pipeline() {
  need_gpu
  # 2 stages x 2 copies: each stage's copies average their gradients with the
  # bucketed all-reduce (gradient_sync.h) through host copies over Gloo, while
  # the stages' activations go over NCCL links.
  # (params_sha256 is the whole model's, gathered from the stages: the same on every task)
  pair_tasks=4 pair quad-pipeline \
    "strategy={\"type\": \"pipeline\", \"stages\": [\"dense_1\"], \"data_parallel\": 2, \"micro_batches\": 4, \"communication\": \"$(comm_engine)\"}" ||
    return 1
  echo "DETAIL: 2 stages x 2 copies on one $GPU_CHECK_DEVICE, the copies' gradients bucketed: the same parameters on every task; $pair_detail"
}
comm_engine() { if [ "$GPU_CHECK_DEVICE" = gpu ]; then echo nccl; else echo ring; fi; }
links_wanted() { if [ "$GPU_CHECK_DEVICE" = gpu ]; then echo nccl; else echo gloo; fi; }
s_bench() {
  need_gpu
  if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "SKIP: $PYTHON has no PyTorch with CUDA"
    exit 77
  fi
  local line="" model config batch steps d t dr tr status=0
  for c in "mlp configs/fashion_mnist_mlp.json 256 300" "cnn configs/fashion_mnist_cnn.json 256 150"; do
    read -r model config batch steps <<<"$c"
    make_job "$config" "$GPU_CHECK_WORK/bench-$model.json" "device=$GPU_CHECK_DEVICE" || return 1
    d=$("$DTRAIN_TEST_BINARY" bench train --config "$GPU_CHECK_WORK/bench-$model.json" --batch "$batch" \
          --steps "$steps" --warmup 10 --json | tail -1) || status=1
    t=$("$PYTHON" bench/torch_gpu_reference.py --model "$model" --batch "$batch" --steps "$steps" --warmup 10 | tail -1) ||
      status=1
    echo "dtrain: $d"
    echo "pytorch: $t"
    dr=$(printf '%s' "$d" | sed -n 's/.*"samples_per_sec":[ ]*\([0-9.e+]*\).*/\1/p')
    tr=$(printf '%s' "$t" | sed -n 's/.*"samples_per_sec":[ ]*\([0-9.e+]*\).*/\1/p')
    line="$line$(awk -v m="$model" -v b="$batch" -v d="${dr:-0}" -v t="${tr:-0}" \
      'BEGIN {printf "%s b%s: dtrain %.0f, pytorch %.0f samples/s (%.2fx); ", m, b, d, t, (t > 0 ? d / t : 0)}')"
  done
  echo "DETAIL: ${line%; }"
  return $status
}
s_gpt_tests() { need_gpu; "$GPU_CHECK_TESTS/test_gpu_training" --durations yes "a tiny GPT*"; }
s_train_gpt() {
  need_gpu
  set -o pipefail
  local dir="$GPU_CHECK_WORK/gpt" steps=750 bar=1.85
  mkdir -p "$dir"
  # (a CPU rehearsal trains 20 steps an epoch and has no loss bar)
  [ "$GPU_CHECK_DEVICE" = gpu ] || { steps=20; bar=9; }
  "$DTRAIN_TEST_BINARY" run --config configs/gpt_fortunes.json --set "device=$GPU_CHECK_DEVICE" \
    --set "output.dir=$dir/out" --overwrite --set "train.steps_per_epoch=$steps" --summary "$dir/summary.json" 2>&1 |
    tee "$dir/run.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "DETAIL: dtrain run exited $rc: $(grep -v '^\s*$' "$dir/run.log" | tail -1)"; return 1; }
  local loss rate seconds device
  loss=$(summary_field "$dir/summary.json" test_loss)
  rate=$(summary_field "$dir/summary.json" train_tokens_per_sec)
  seconds=$(summary_field "$dir/summary.json" wall_seconds)
  device=$(summary_field "$dir/summary.json" device)
  echo "DETAIL: gpt_fortunes on $device, $(( 2 * steps )) steps: validation loss $(printf '%.3f' "$loss") nats" \
       "($(awk -v l="$loss" 'BEGIN {printf "%.3f", l / log(2)}') bits) per byte, $(printf '%.0f' "$rate") tokens/s," \
       "$(printf '%.1f' "$seconds") s"
  [ "$device" = cuda:0 ] || [ "$GPU_CHECK_DEVICE" = cpu ] || return 1
  awk -v l="$loss" -v b="$bar" 'BEGIN {exit !(l <= b)}' || { echo "DETAIL: validation loss $loss > $bar"; return 1; }
}
s_bench_gpt() {
  need_gpu
  set -o pipefail  # (each step runs in its own bash)
  local cuda=cuda steps=100 status=0
  [ "$GPU_CHECK_DEVICE" = gpu ] || { cuda=cpu; steps=5; }
  if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() or sys.argv[1] == "cpu" else 1)' "$cuda" 2>/dev/null; then
    echo "SKIP: $PYTHON has no PyTorch with CUDA"
    exit 77
  fi
  local d t line
  d=$("$DTRAIN_TEST_BINARY" bench train --config configs/gpt_fortunes.json --set "device=$GPU_CHECK_DEVICE" \
        --steps "$steps" --warmup 10 --json | tail -1) || status=1
  t=$("$PYTHON" bench/torch_gpt_reference.py train --device "$cuda" --steps "$steps" --warmup 10 | tail -1) || status=1
  echo "dtrain: $d"
  echo "pytorch: $t"
  line=$(printf '%s\n%s\n' "$d" "$t" | "$PYTHON" -c '
import json, sys
d, t = (json.loads(l) if l.strip().startswith("{") else {} for l in sys.stdin.read().split("\n")[:2])
dt, tt = d.get("samples_per_sec", 0) * 128, t.get("tokens_per_sec", 0)  # (gpt_fortunes: 128 tokens a sample)
print(f"gpt b32 t128: dtrain {dt:.0f}, pytorch {tt:.0f} tokens/s ({dt / tt if tt else 0:.2f}x)")
sys.exit(0 if dt > 0 and tt > 0 else 1)') || status=1
  local seq kind a p
  for c in "128 auto" "512 auto" "2048 auto" "2048 rows"; do
    read -r seq kind <<<"$c"
    a=$("$DTRAIN_TEST_BINARY" bench attention --device "$GPU_CHECK_DEVICE" --gpu-kernels "$kind" --seq "$seq" \
          --batch 4 --heads 4 --head-dim 32 --steps 10 --warmup 2 --json | tail -1) || status=1
    p=$("$PYTHON" bench/torch_gpt_reference.py attention --device "$cuda" --seq "$seq" --batch 4 --heads 4 \
          --head-dim 32 --steps 10 --warmup 2 | tail -1) || status=1
    echo "dtrain: $a"
    echo "pytorch: $p"
    line="$line; $(printf '%s\n%s\n' "$a" "$p" | "$PYTHON" -c '
import json, sys
a, p = (json.loads(l) if l.strip().startswith("{") else {} for l in sys.stdin.read().split("\n")[:2])
seq, kind, ams, pms = a.get("seq", "?"), a.get("gpu_kernels", "?"), a.get("ms", 0), p.get("ms", 0)
amem, pmem = a.get("peak_extra_mib", 0), p.get("peak_extra_mib", 0)
print(f"attn t{seq} {kind}: {ams:.3f} vs {pms:.3f} ms, {amem:.0f} vs {pmem:.0f} MiB")
sys.exit(0 if ams > 0 and pms > 0 else 1)')" || status=1
  done
  echo "DETAIL: $line"
  return $status
}
# GPT-2 small's shape, dtrain against PyTorch (issue 58's measurement). A CPU
# rehearsal (GPU_CHECK_DEVICE=cpu) takes batch 1 and one timed step per row.
s_bench_gpt2() {
  need_gpu
  local cuda=cuda steps=10 warmup=3 batch=8 gemm=8192 sdpa=flash status=0
  [ "$GPU_CHECK_DEVICE" = gpu ] || { cuda=cpu; steps=1; warmup=1; batch=1; gemm=2048; sdpa=auto; }
  local rows="$GPU_CHECK_WORK/gpt2.jsonl" torch=1
  : >"$rows"
  if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() or sys.argv[1] == "cpu" else 1)' "$cuda" 2>/dev/null; then
    echo "no PyTorch with CUDA in $PYTHON: the dtrain rows only"
    torch=0
  fi
  # row LABEL COMMAND...: runs it, adds its last JSON line to the rows with "row": LABEL.
  # (through a file: `tee /dev/stderr` would reopen, and truncate, the step's output file)
  row() {
    local label=$1 out file="$GPU_CHECK_WORK/gpt2-row.out"
    shift
    echo "=== $label: $*"
    "$@" >"$file" 2>&1
    cat "$file"
    out=$(grep -a '^{' "$file" | tail -1)
    [ -n "$out" ] || { echo "$label: no result"; return 1; }
    printf '%s\n' "$out" | "$PYTHON" -c 'import json, sys; r = json.loads(sys.stdin.read()); r["row"] = sys.argv[1]; print(json.dumps(r))' "$label" >>"$rows"
  }
  local reference=(bench/torch_gpt_reference.py train --device "$cuda" --vocab 50304 --seq 1024 --stride 1024
                   --width 768 --heads 12 --head-dim 64 --blocks 12 --gelu tanh --batch "$batch" --lr 6e-4
                   --weight-decay 0.1 --steps "$steps" --warmup "$warmup")
  local bench=("$DTRAIN_TEST_BINARY" bench train --config configs/gpt2_small.json --set "device=$GPU_CHECK_DEVICE"
               --batch "$batch" --steps "$steps" --warmup "$warmup" --json)
  if [ "$torch" = 1 ]; then
    row "gemm bfloat16" "$PYTHON" bench/torch_gpt_reference.py gemm --device "$cuda" --dtype bfloat16 --gemm-size "$gemm" || status=1
    row "gemm float32" "$PYTHON" bench/torch_gpt_reference.py gemm --device "$cuda" --dtype float32 --gemm-size "$gemm" || status=1
  fi
  row "dtrain float32" "${bench[@]}" --set train.precision=float32 || status=1
  [ "$torch" = 1 ] && { row "torch eager float32" "$PYTHON" "${reference[@]}" || status=1; }
  row "dtrain mixed_bfloat16" "${bench[@]}" --set train.precision=mixed_bfloat16 || status=1
  [ "$torch" = 1 ] && { row "torch eager bf16+flash" "$PYTHON" "${reference[@]}" --autocast --sdpa "$sdpa" || status=1; }
  [ "$torch" = 1 ] && { row "torch compile bf16" "$PYTHON" "${reference[@]}" --autocast --compile || status=1; }
  "$PYTHON" bench/gpt2_summary.py "$rows" || status=1
  echo "=== where dtrain's mixed_bfloat16 step goes"
  "$DTRAIN_TEST_BINARY" bench train --config configs/gpt2_small.json --set "device=$GPU_CHECK_DEVICE" \
    --set train.precision=mixed_bfloat16 --batch "$batch" --steps 1 --warmup 1 --profile "$warmup" || status=1
  return $status
}
export -f comm_engine links_wanted need_gpu make_job summary_field train_run pair s_version s_ops s_layers s_train_mlp s_train_cnn s_precision \
  s_train_tests s_nccl s_nccl_train s_pair_reducer s_pair_pipeline s_quad_pipeline s_bench s_gpt_tests s_train_gpt s_bench_gpt s_bench_gpt2

step version 15 s_version
step bench-gpt2 240 s_bench_gpt2
step ops 60 s_ops
step layers 40 s_layers
step train-mlp 30 s_train_mlp
step train-cnn 35 s_train_cnn
step precision 35 s_precision
step train-tests 60 s_train_tests
step nccl 45 s_nccl
step nccl-train 30 s_nccl_train
step pair-reducer 45 s_pair_reducer
step pair-pipeline 45 s_pair_pipeline
step quad-pipeline 45 s_quad_pipeline
step bench 45 s_bench
step gpt-tests 60 s_gpt_tests
step train-gpt 90 s_train_gpt
step bench-gpt 60 s_bench_gpt

rm -rf "$work"
echo
awk -F'\t' '{printf "%-14s %-8s %7s  %s\n", $1, $2, $3, $4}' "$summary"
counts="$(awk -F'\t' 'NR > 1 {n[$2]++} END {printf "%d pass, %d fail, %d skip, %d timeout", n["pass"], n["fail"], n["skip"], n["timeout"]}' "$summary")"
echo "gpu-check: $counts in $(( SECONDS - t_start ))s; summary $summary, log $log" | tee -a "$log"
awk -F'\t' 'NR > 1 && ($2 == "fail" || $2 == "timeout") {bad = 1} END {exit bad}' "$summary"
