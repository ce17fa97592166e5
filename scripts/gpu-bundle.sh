#!/usr/bin/env bash
# Packs what a lent GPU machine needs to run dtrain's GPU check (scripts/gpu-check.sh)
# and GPU tests without building there, small enough to travel in the device tool's
# carry (64 MiB with the working tree; the bundle must stay under 48 MiB). The GPU
# machine's image has the NVIDIA driver, the CUDA toolkit and PyTorch, whose pip
# wheels (site-packages/nvidia/*/lib) bring cuBLASLt, cuDNN 9 and NCCL: none of those
# travel. What does, from an existing CUDA build (no rebuild unless --build):
#   bin.tar.xz   dtrain and the tests/gpu binaries, stripped
#   lib.tar.xz   the shared libraries they need that the image lacks (oneDNN, Gloo,
#                protobuf, ...): everything ldd lists except glibc, libstdc++,
#                libgcc_s and CUDA's own libraries (cudart is linked statically)
#   data/        Fashion-MNIST cut to its first 8192 training and 2000 test images
#                (the GPU tests take at most 4096 and 1000), gzipped IDX files, and
#                fortunes.tar.xz: the GPT's corpus (Debian's fortunes, the text files
#                configs/gpt_fortunes.json reads from /usr/share/games/fortunes)
#   MANIFEST.txt what was packed, from which commit and build, and each part's size
# On the GPU machine scripts/gpu-env.sh unpacks it; scripts/gpu-check.sh,
# test-gpu.sh and bench-gpu.sh use it. Prints the size of each part and
# exits 1 when the whole is over the limit.
#
# Usage: scripts/gpu-bundle.sh [--build-dir DIR] [--out DIR] [--build] [--fast] [--limit-mib N]
#   --build-dir DIR  the CUDA build to pack (default build/)
#   --out DIR        the bundle directory, replaced (default .gpu/, git-ignored)
#   --build          build first: scripts/build.sh -DDTRAIN_CUDA=ON (into build/)
#   --fast           xz -1 instead of xz -6: larger, made several times faster; the
#                    size test (ctest -L gpu-bundle) uses it, an upper bound of the real size
#   --limit-mib N    the size limit (default 48)
# Then, with the device tool: run with carry [".gpu"] and command
# `bash scripts/gpu-check.sh` (docs/precision-and-gpus.md).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

build_dir=build
out=.gpu
do_build=0
level=6
limit_mib=48
train_samples=8192
test_samples=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --build) do_build=1; shift ;;
    --fast) level=1; shift ;;
    --limit-mib) limit_mib="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-bundle.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ "$do_build" = 1 ]; then
  bash scripts/build.sh -DDTRAIN_CUDA=ON
  build_dir=build
fi
if [ ! -x "$build_dir/dtrain" ]; then
  echo "gpu-bundle.sh: no $build_dir/dtrain: build with the CUDA backend first (scripts/build.sh -DDTRAIN_CUDA=ON, or --build)" >&2
  exit 1
fi
if ! ldd "$build_dir/dtrain" | grep 'libcublasLt' >/dev/null; then
  echo "gpu-bundle.sh: $build_dir/dtrain is not a CUDA build (it does not link cuBLASLt): configure with -DDTRAIN_CUDA=ON" >&2
  exit 1
fi
data_src=/usr/share/datasets/fashion-mnist
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [ -f "$data_src/$f" ] || { echo "gpu-bundle.sh: $data_src/$f is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done

tests=(test_gpu_ops test_gpu_layers test_gpu_training test_gpu_pipeline test_gpu_nccl test_gpu_nccl_training test_gpu_mirrored)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$build_dir/dtrain" "$stage/bin/"
for t in "${tests[@]}"; do
  # (the NCCL tests exist in builds with NCCL only)
  if [ -x "$build_dir/tests/gpu/$t" ]; then cp "$build_dir/tests/gpu/$t" "$stage/bin/"; fi
done
strip "$stage"/bin/*

# The libraries beyond the image's: not glibc's, not the compiler's runtime (the
# image's libstdc++ is newer than this build needs), not CUDA's (from the wheels).
ldd "$stage"/bin/* | awk '/=> \// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
  grep -v -E '/lib(cuda|cublas|cublasLt|cudnn[a-z_]*|cudart|nvrtc|nccl|nvidia-ml)\.so' >"$stage/libs.txt"
while read -r lib; do cp -L "$lib" "$stage/lib/$(basename "$lib")"; done <"$stage/libs.txt"
strip --strip-unneeded "$stage"/lib/* 2>/dev/null || true

rm -rf "$out"
mkdir -p "$out/data"
xz_cmd=(xz -"$level" -T2)
(cd "$stage" && tar cf - bin) | nice -n 10 "${xz_cmd[@]}" >"$out/bin.tar.xz"
(cd "$stage" && tar cf - lib) | nice -n 10 "${xz_cmd[@]}" >"$out/lib.tar.xz"

# Fashion-MNIST's first N images and labels, as IDX files with their counts set to N.
python3 - "$data_src" "$out/data" "$train_samples" "$test_samples" <<'PY'
import gzip, struct, sys
src, dst, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for prefix, n in (("train", n_train), ("t10k", n_test)):
    for kind, header, item in (("images-idx3-ubyte", 16, 28 * 28), ("labels-idx1-ubyte", 8, 1)):
        name = f"{prefix}-{kind}.gz"
        with gzip.open(f"{src}/{name}", "rb") as f:
            head = f.read(header)
            body = f.read(n * item)
        count = struct.unpack(">I", head[4:8])[0]
        if count < n:
            sys.exit(f"gpu-bundle.sh: {name} has {count} items, fewer than {n}")
        with open(f"{dst}/{name}", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as g:
            g.write(head[:4] + struct.pack(">I", n) + head[8:] + body)
PY
echo "$train_samples training and $test_samples test images: the first ones of Fashion-MNIST" >"$out/data/CUT.txt"
text_src=/usr/share/games/fortunes
[ -f "$text_src/fortunes" ] || { echo "gpu-bundle.sh: $text_src/fortunes is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
(cd "$text_src" && tar cf - --exclude='*.dat' --exclude='*.u8' .) | nice -n 10 "${xz_cmd[@]}" >"$out/data/fortunes.tar.xz"

glibc_needed=$(for f in "$stage"/bin/* "$stage"/lib/*; do objdump -T "$f" 2>/dev/null; done |
  grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -1)
{
  echo "dtrain GPU bundle (scripts/gpu-bundle.sh)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), from $(cd "$build_dir" && pwd)"
  echo "needs: glibc >= ${glibc_needed#GLIBC_}, libstdc++ (GLIBCXX_3.4.30), cuBLASLt 13, cuDNN 9, NCCL 2 and the CUDA 13 driver from the machine"
  echo "built against: cuDNN $(sed -n 's/^#define CUDNN_\(MAJOR\|MINOR\|PATCHLEVEL\) \([0-9]*\).*/\2/p' /usr/local/cuda/include/cudnn_version.h 2>/dev/null | paste -sd.)," \
       "NCCL $(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' /usr/local/cuda/include/nccl.h 2>/dev/null | paste -sd.)"
  echo "bin: $(cd "$stage/bin" && ls | paste -sd' ')"
  echo "lib: $(cd "$stage/lib" && ls | paste -sd' ')"
  echo "xz level: $level"
} >"$out/MANIFEST.txt"

mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
size_of() { du -cb "$@" | tail -1 | cut -f1; }
bin_raw=$(size_of "$stage/bin"); lib_raw=$(size_of "$stage/lib")
total=$(size_of "$out")
printf "%-12s %10s   (%s unpacked)\n" bin.tar.xz "$(mib "$(size_of "$out/bin.tar.xz")")" "$(mib "$bin_raw")"
printf "%-12s %10s   (%s unpacked: %s)\n" lib.tar.xz "$(mib "$(size_of "$out/lib.tar.xz")")" "$(mib "$lib_raw")" \
  "$(cd "$stage/lib" && ls | sed 's/\.so.*//' | paste -sd' ')"
printf "%-12s %10s   (%s training, %s test images; the fortunes corpus %s)\n" data/ "$(mib "$(size_of "$out/data")")" \
  "$train_samples" "$test_samples" "$(mib "$(size_of "$out/data/fortunes.tar.xz")")"
printf "%-12s %10s   limit %s MiB\n" "$out" "$(mib "$total")" "$limit_mib"
if [ "$total" -gt $(( limit_mib * 1048576 )) ]; then
  echo "gpu-bundle.sh: the bundle is $(mib "$total"), over the $limit_mib MiB limit (the device tool carries 64 MiB with the working tree)" >&2
  exit 1
fi
echo "gpu-bundle.sh: $out is ready: carry it (device tool: carry [\"$out\"]) and run bash scripts/gpu-check.sh"
