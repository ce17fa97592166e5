# Sourced (not run) by gpu-check.sh, test-gpu.sh and bench-gpu.sh
# on a GPU machine that runs from a bundle (.gpu/, made by scripts/gpu-bundle.sh)
# instead of a build tree. It
#   - unpacks the bundle's bin.tar.xz and lib.tar.xz into $DTRAIN_GPU_UNPACK
#     (default /tmp/dtrain-gpu; again only when the bundle changed), with xz or,
#     where xz is missing, Python's lzma module
#   - finds CUDA's libraries (cuBLASLt, cuDNN, NCCL) in PyTorch's nvidia-* wheels
#     (site-packages/nvidia/*/lib) or the CUDA toolkit, and puts them with the
#     bundle's libraries on LD_LIBRARY_PATH
#   - installs the bundle's Fashion-MNIST files where the configs and tests read
#     them (/usr/share/datasets/fashion-mnist) when that folder has none, and the
#     fortunes corpus into /usr/share/games/fortunes (configs/gpt_fortunes.json)
#   - exports DTRAIN_TEST_BINARY (the bundled dtrain, which the test binaries run),
#     DTRAIN_TEST_SOURCE_DIR, DTRAIN_GPU_DATA (the bundle's data folder),
#     DTRAIN_GPU_DATA_CUT (1 when the installed data are the bundle's cut set) and
#     sets dtrain_gpu_test_dir (where the test binaries are).
# Returns 1, after saying why, when the bundle cannot be unpacked.
# Usage: DTRAIN_GPU_BUNDLE=.gpu source scripts/gpu-env.sh   (.gpu is the default)
dtrain_gpu_bundle="${DTRAIN_GPU_BUNDLE:-.gpu}"
dtrain_gpu_unpack="${DTRAIN_GPU_UNPACK:-/tmp/dtrain-gpu}"

dtrain_gpu_unxz() {  # dtrain_gpu_unxz FILE.tar.xz DIR: unpacks the archive into DIR
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$1" | tar xf - -C "$2"
  else
    "${PYTHON:-python3}" -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$1" |
      tar xf - -C "$2"
  fi
}

if [ ! -f "$dtrain_gpu_bundle/bin.tar.xz" ] || [ ! -f "$dtrain_gpu_bundle/lib.tar.xz" ]; then
  echo "gpu-env.sh: no bundle in $dtrain_gpu_bundle (make it with scripts/gpu-bundle.sh and carry it)" >&2
  return 1 2>/dev/null || exit 1
fi
dtrain_gpu_stamp="$(cat "$dtrain_gpu_bundle/MANIFEST.txt" 2>/dev/null; ls -l "$dtrain_gpu_bundle"/*.tar.xz)"
if [ "$(cat "$dtrain_gpu_unpack/.stamp" 2>/dev/null)" != "$dtrain_gpu_stamp" ]; then
  rm -rf "$dtrain_gpu_unpack"
  mkdir -p "$dtrain_gpu_unpack"
  if ! dtrain_gpu_unxz "$dtrain_gpu_bundle/bin.tar.xz" "$dtrain_gpu_unpack" ||
     ! dtrain_gpu_unxz "$dtrain_gpu_bundle/lib.tar.xz" "$dtrain_gpu_unpack"; then
    echo "gpu-env.sh: could not unpack $dtrain_gpu_bundle into $dtrain_gpu_unpack" >&2
    return 1 2>/dev/null || exit 1
  fi
  printf '%s' "$dtrain_gpu_stamp" >"$dtrain_gpu_unpack/.stamp"
fi

# CUDA's libraries: the wheels of the Python that has PyTorch (python3 there), then
# the toolkit. The wheels for CUDA 13 put cuBLAS in nvidia/cu13/lib, cuDNN in
# nvidia/cudnn/lib, NCCL in nvidia/nccl/lib.
dtrain_gpu_cuda_dirs=$("${PYTHON:-python3}" - <<'PY' 2>/dev/null || true
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = []
for root in roots:
    dirs += glob.glob(os.path.join(root, "nvidia", "*", "lib"))
print(":".join(sorted(set(dirs))))
PY
)
for d in /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib; do
  [ -d "$d" ] && dtrain_gpu_cuda_dirs="$dtrain_gpu_cuda_dirs:$d"
done
LD_LIBRARY_PATH="$dtrain_gpu_unpack/lib:$dtrain_gpu_cuda_dirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
LD_LIBRARY_PATH="$(printf '%s' "$LD_LIBRARY_PATH" | tr -s ':' | sed 's/^://; s/:$//')"
export LD_LIBRARY_PATH

export DTRAIN_GPU_DATA="$PWD/$dtrain_gpu_bundle/data"
case "$dtrain_gpu_bundle" in /*) DTRAIN_GPU_DATA="$dtrain_gpu_bundle/data" ;; esac
export DTRAIN_GPU_DATA_CUT=0
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  if mkdir -p /usr/share/datasets/fashion-mnist 2>/dev/null &&
     cp "$DTRAIN_GPU_DATA"/*.gz "$DTRAIN_GPU_DATA/CUT.txt" /usr/share/datasets/fashion-mnist/; then
    :
  else
    echo "gpu-env.sh: could not install Fashion-MNIST into /usr/share/datasets/fashion-mnist (tests that read it will fail)" >&2
  fi
fi
[ -f /usr/share/datasets/fashion-mnist/CUT.txt ] && DTRAIN_GPU_DATA_CUT=1
if [ ! -f /usr/share/games/fortunes/fortunes ] && [ -f "$DTRAIN_GPU_DATA/fortunes.tar.xz" ]; then
  if ! { mkdir -p /usr/share/games/fortunes 2>/dev/null &&
         dtrain_gpu_unxz "$DTRAIN_GPU_DATA/fortunes.tar.xz" /usr/share/games/fortunes; }; then
    echo "gpu-env.sh: could not install the fortunes corpus into /usr/share/games/fortunes (the GPT steps will fail)" >&2
  fi
fi
export DTRAIN_TEST_BINARY="$dtrain_gpu_unpack/bin/dtrain" DTRAIN_TEST_SOURCE_DIR="$PWD"
dtrain_gpu_test_dir="$dtrain_gpu_unpack/bin"
