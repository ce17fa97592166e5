# Sourced by test-gpu.sh and bench-gpu.sh on a GPU machine that runs from a
# bundle (.gpu/, made by scripts/gpu-bundle.sh) instead of a build tree:
# unpacks the bundled libraries, finds CUDA's libraries (cuBLASLt, cuDNN) in the
# CUDA toolkit or in PyTorch's nvidia-* wheels, installs the Fashion-MNIST files
# where the configs expect them, and points the tests at the bundled binary.
if [ -d .gpu/bin ]; then
  dtrain_gpu_libs=/tmp/dtrain-gpu-lib
  mkdir -p "$dtrain_gpu_libs"
  for f in .gpu/lib/*.gz; do
    [ -e "$f" ] && gunzip -c "$f" >"$dtrain_gpu_libs/$(basename "$f" .gz)"
  done
  cuda_dirs=$(${PYTHON:-python3} - <<'PY' 2>/dev/null || true
import glob, os, site
dirs = []
for root in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += glob.glob(os.path.join(root, "nvidia", "*", "lib"))
print(":".join(sorted(set(dirs))))
PY
)
  export LD_LIBRARY_PATH="$dtrain_gpu_libs:${cuda_dirs}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    mkdir -p /usr/share/datasets/fashion-mnist
    cp .gpu/data/*.gz /usr/share/datasets/fashion-mnist/
  fi
  export DTRAIN_TEST_BINARY="$PWD/.gpu/bin/dtrain" DTRAIN_TEST_SOURCE_DIR="$PWD"
  dtrain_gpu_test_dir="$PWD/.gpu/bin"
fi
