#!/usr/bin/env bash
# Runs the gpu-labelled tests on a machine with a GPU: every op on the GPU
# against the CPU (tests/gpu/test_gpu_ops.cpp), a ResNet-style model's outputs
# and gradients against the CPU (test_gpu_layers.cpp) and training on the GPU
# (test_gpu_training.cpp), a pipeline's stages on GPUs (test_gpu_pipeline.cpp),
# NCCL's collectives and NCCL in training (test_gpu_nccl*.cpp, builds with
# NCCL), several GPUs in one process and mirrored over them (test_gpu_mirrored.cpp).
# Here a skipped test is a failure: the point of this script is that they ran.
# The one exception: the tests of two GPUs need two and say so when the machine
# has one ("needs two GPUs").
#
# From a build tree (the machine has dtrain's build dependencies): builds with
# -DDTRAIN_CUDA=ON and runs `ctest -L gpu`. From a bundle (.gpu/, made by
# scripts/gpu-bundle.sh on a build machine): runs the bundled test binaries.
# Usage: scripts/test-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."

if [ -d .gpu/bin ]; then
  source scripts/gpu-env.sh
  "$DTRAIN_TEST_BINARY" devices || exit 1
  status=0
  for t in test_gpu_ops test_gpu_layers test_gpu_training test_gpu_pipeline test_gpu_nccl test_gpu_nccl_training test_gpu_mirrored; do
    [ -x "$dtrain_gpu_test_dir/$t" ] || { echo "test-gpu.sh: $t is not in the bundle" >&2; status=1; continue; }
    echo "== $t"
    # The same limits as ctest's TIMEOUT for these tests: a hung GPU call fails, never blocks.
    timeout 900 "$dtrain_gpu_test_dir/$t" --durations yes 2>&1 | tee "/tmp/$t.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    if grep DTRAIN-SKIPPED "/tmp/$t.log" | grep -qv "needs two GPUs"; then
      echo "test-gpu.sh: $t was skipped: no usable GPU" >&2
      status=1
    fi
  done
  exit "$status"
fi

bash scripts/build.sh -DDTRAIN_CUDA=ON || exit 1
./build/dtrain devices || exit 1
cd build
ctest -L gpu --output-on-failure 2>&1 | tee /tmp/dtrain-ctest-gpu.log
status=${PIPESTATUS[0]}
if grep "(Skipped)" /tmp/dtrain-ctest-gpu.log | grep -qv "never calls the collective"; then
  echo "test-gpu.sh: gpu tests were skipped: no usable GPU" >&2
  exit 1
fi
exit "$status"
