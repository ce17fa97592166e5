#!/usr/bin/env bash
# Packs what a GPU machine needs to run dtrain's GPU tests and benchmarks
# without building there (the lent GPU machines have CUDA and PyTorch but not
# Debian's oneDNN, Gloo, CLI11, ...): builds here with the CUDA backend, then
# writes .gpu/ (git-ignored) with
#   bin/   dtrain and the gpu test binaries (stripped)
#   lib/   the shared libraries they need beyond glibc, libstdc++ and CUDA's own
#          (cuBLASLt, cuDNN: taken from the GPU machine), gzipped; libnccl goes along
#   data/  the Fashion-MNIST files the configs and tests read
# On the GPU machine, scripts/test-gpu.sh and scripts/bench-gpu.sh use .gpu/
# through scripts/gpu-env.sh. Usage: scripts/gpu-bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh -DDTRAIN_CUDA=ON
rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib .gpu/data
cp build/dtrain .gpu/bin/
for t in test_gpu_ops test_gpu_layers test_gpu_training test_gpu_pipeline test_gpu_nccl test_gpu_nccl_training test_gpu_mirrored; do
  # (the NCCL tests exist in builds with NCCL only)
  if [ -x "build/tests/gpu/$t" ]; then cp "build/tests/gpu/$t" .gpu/bin/; fi
done
strip .gpu/bin/*
ldd .gpu/bin/* | awk '/=> \// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
  grep -v -E '/lib(cuda|cublas|cublasLt|cudnn[a-z_]*|cudart|nvrtc)\.so' |
  while read -r lib; do gzip -c "$lib" >".gpu/lib/$(basename "$lib").gz"; done
cp /usr/share/datasets/fashion-mnist/*.gz .gpu/data/
du -sh .gpu
echo "carry .gpu to the GPU machine, then run: bash scripts/test-gpu.sh && bash scripts/bench-gpu.sh"
