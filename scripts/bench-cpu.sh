#!/usr/bin/env bash
# CPU training throughput of dtrain against a PyTorch reference.
#
# For the MLP (batch 128) and the CNN (batch 64) on Fashion-MNIST, at each
# thread count, runs `dtrain bench train` and bench/torch_reference.py (the
# same model in PyTorch, see its docstring) alternately, R times each, and
# prints the median samples/s of each and their ratio dtrain/pytorch.
# Alternating and comparing ratios keeps the comparison fair on a busy machine:
# whatever else runs slows both sides alike.
#
# Usage: scripts/bench-cpu.sh [options]
#   --repeats R          measurements per (model, threads, framework); median taken (default 3)
#   --threads "1 2"      thread counts to measure (default "1 2")
#   --mlp-steps N        timed steps per MLP measurement (default 300)
#   --cnn-steps N        timed steps per CNN measurement (default 100)
#   --warmup N           untimed steps before each measurement (default 10)
#   --out FILE           raw JSON lines, one per measurement (default build/bench-cpu.jsonl)
#   --build-dir DIR      dtrain's build directory (default build)
#   --no-build           use the existing DIR/dtrain as it is
#   --no-torch           measure dtrain only
#   --torch-lib-dir DIR  put DIR first on LD_LIBRARY_PATH for the PyTorch runs only,
#                        e.g. an OpenBLAS directory (see "BLAS" below)
#   --run-timeout S      kill any single measurement after S seconds (default 300)
#
# PyTorch runs on Debian's system python (PYTHON, default /usr/bin/python3);
# if `import torch` fails there, only dtrain is measured and the script says
# how to install it (apt-get install python3-torch).
#
# BLAS: Debian's PyTorch has no MKL, so its Linear layers run on whatever
# libblas.so.3 resolves to. With only libblas3 installed that is the netlib
# reference BLAS, an unoptimised triple loop, which makes PyTorch's dense
# layers several times slower than a real PyTorch install. The footer says
# which BLAS was used and warns about the reference one. For a fair dense
# comparison, install OpenBLAS (apt-get install libopenblas0-openmp) or, to
# leave the system alone, unpack it somewhere and pass --torch-lib-dir:
#   apt-get download libopenblas0-openmp && dpkg -x libopenblas0-openmp_*.deb /tmp/ob
#   scripts/bench-cpu.sh --torch-lib-dir /tmp/ob/usr/lib/x86_64-linux-gnu/openblas-openmp
#
# Busy machines: OpenMP workers spin-wait between parallel regions (libgomp's
# default), so when other processes hold the cores a multi-thread run can be
# many times slower than a single-thread one, for dtrain and PyTorch alike.
# The footer prints the load average; if it is near the core count, treat the
# threads > 1 rows as noise, or rerun with OMP_WAIT_POLICY=PASSIVE (the
# environment reaches both frameworks).
#
# Run from anywhere; paths are relative to the repository root.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

repeats=3
threads_list="1 2"
mlp_steps=300
cnn_steps=100
warmup=10
out=""
build_dir="build"
do_build=1
use_torch=1
torch_lib_dir=""
run_timeout=300
python="${PYTHON:-/usr/bin/python3}"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die() { echo "bench-cpu: $*" >&2; exit 2; }
need_value() { [ $# -ge 2 ] || die "$1 needs a value"; }
is_count() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ]; }

while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) need_value "$@"; repeats="$2"; shift 2 ;;
    --threads) need_value "$@"; threads_list="$2"; shift 2 ;;
    --mlp-steps) need_value "$@"; mlp_steps="$2"; shift 2 ;;
    --cnn-steps) need_value "$@"; cnn_steps="$2"; shift 2 ;;
    --warmup) need_value "$@"; warmup="$2"; shift 2 ;;
    --out) need_value "$@"; out="$2"; shift 2 ;;
    --build-dir) need_value "$@"; build_dir="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --no-torch) use_torch=0; shift ;;
    --torch-lib-dir) need_value "$@"; torch_lib_dir="$2"; shift 2 ;;
    --run-timeout) need_value "$@"; run_timeout="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
is_count "$repeats" 1 || die "--repeats must be a positive integer"
is_count "$mlp_steps" 1 || die "--mlp-steps must be a positive integer"
is_count "$cnn_steps" 1 || die "--cnn-steps must be a positive integer"
is_count "$warmup" 0 || die "--warmup must be a non-negative integer"
is_count "$run_timeout" 1 || die "--run-timeout must be a positive integer"
for t in $threads_list; do is_count "$t" 1 || die "--threads: '$t' is not a positive integer"; done
[ -n "$threads_list" ] || die "--threads is empty"
[ -z "$torch_lib_dir" ] || [ -d "$torch_lib_dir" ] || die "--torch-lib-dir $torch_lib_dir: no such directory"
out="${out:-$build_dir/bench-cpu.jsonl}"
dtrain="$build_dir/dtrain"

# --- build -------------------------------------------------------------------
if [ "$do_build" -eq 1 ]; then
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    echo "bench-cpu: configuring $build_dir (Release)" >&2
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  # Incremental: a no-op when dtrain is up to date.
  echo "bench-cpu: building dtrain in $build_dir (a no-op when it is up to date)" >&2
  cmake --build "$build_dir" --target dtrain -j"$(nproc)" >/dev/null \
    || die "building dtrain failed (cmake --build $build_dir --target dtrain)"
fi
[ -x "$dtrain" ] || die "$dtrain not found (drop --no-build, or build it)"
build_type="$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)"
case "$build_type" in
  Release|RelWithDebInfo) ;;
  *) echo "bench-cpu: warning: $build_dir is a '${build_type:-unknown}' build; timings of an" \
          "unoptimised build are not meaningful (reconfigure with -DCMAKE_BUILD_TYPE=Release)" >&2 ;;
esac

# --- PyTorch available? --------------------------------------------------------
if [ "$use_torch" -eq 1 ]; then
  if ! timeout 60 "$python" -c 'import torch' >/dev/null 2>&1; then
    echo "bench-cpu: PyTorch is not installed for $python; measuring dtrain only." >&2
    echo "bench-cpu: to compare with PyTorch: apt-get install python3-torch" >&2
    use_torch=0
  fi
fi

# The PyTorch command prefix, with --torch-lib-dir first on its library path.
torch_cmd=("$python")
if [ -n "$torch_lib_dir" ]; then
  torch_cmd=(env "LD_LIBRARY_PATH=$torch_lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$python")
fi

mkdir -p "$(dirname "$out")"
: >"$out"

# Pulls samples_per_sec out of one JSON line (dtrain prints no spaces, Python does).
samples_per_sec() { sed -nE 's/.*"samples_per_sec": *([0-9.eE+-]+).*/\1/p' <<<"$1"; }

# Median of the numbers given as arguments (mean of the middle two for an even count).
median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
    END { if (NR % 2) printf "%.1f", v[(NR + 1) / 2]; else printf "%.1f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Runs one measurement (the command in "$@"), checks it printed a JSON line with a
# throughput, appends the line to $out and sets $last_sps. Bounded by --run-timeout.
last_sps=""
measure() {
  local label="$1"; shift
  local line rc=0
  line="$(timeout "$run_timeout" "$@" 2>"$err_file" | tail -n 1)" || rc=$?
  if [ "$rc" -ne 0 ]; then
    cat "$err_file" >&2 || true
    [ "$rc" -eq 124 ] && die "$label: no result within --run-timeout ${run_timeout}s"
    die "$label: exited with status $rc"
  fi
  last_sps="$(samples_per_sec "$line")"
  [ -n "$last_sps" ] || die "$label: no samples_per_sec in its output: $line"
  printf '%s\n' "$line" >>"$out"
}
err_file="$(mktemp)"
trap 'rm -f "$err_file"' EXIT

# --- measure ---------------------------------------------------------------------
load_before="$(cut -d' ' -f1 /proc/loadavg)"
# model  batch  steps  dtrain config
cases=(
  "mlp 128 $mlp_steps configs/fashion_mnist_mlp.json"
  "cnn 64 $cnn_steps configs/fashion_mnist_cnn.json"
)
rows=()
torch_blas=""
for c in "${cases[@]}"; do
  read -r model batch steps config <<<"$c"
  for threads in $threads_list; do
    d_results=(); t_results=()
    for ((r = 1; r <= repeats; r++)); do
      echo "bench-cpu: $model batch $batch threads $threads: run $r/$repeats" >&2
      measure "dtrain $model" "$dtrain" bench train --config "$config" --batch "$batch" \
        --threads "$threads" --steps "$steps" --warmup "$warmup" --json
      d_results+=("$last_sps")
      if [ "$use_torch" -eq 1 ]; then
        measure "pytorch $model" "${torch_cmd[@]}" bench/torch_reference.py --model "$model" --batch "$batch" \
          --threads "$threads" --steps "$steps" --warmup "$warmup"
        t_results+=("$last_sps")
        torch_blas="$(sed -nE 's/.*"blas": *"([^"]*)".*/\1/p' <<<"$(tail -n 1 "$out")")"
      fi
    done
    d_med="$(median "${d_results[@]}")"
    if [ "$use_torch" -eq 1 ]; then
      t_med="$(median "${t_results[@]}")"
      ratio="$(awk -v a="$d_med" -v b="$t_med" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
    else
      t_med="n/a"; ratio="n/a"
    fi
    rows+=("$model $batch $threads $d_med $t_med $ratio")
  done
done

# --- report ----------------------------------------------------------------------
echo
echo "Fashion-MNIST training throughput, median of $repeats (samples/s; higher is better)"
table_row() { printf '%-6s %6s %8s %16s %16s %16s\n' "$@"; }
table_row model batch threads "dtrain" "pytorch" "dtrain/pytorch"
for row in "${rows[@]}"; do
  # shellcheck disable=SC2086  # a row is six space-free words
  table_row $row
done
echo
echo "steps per measurement: mlp $mlp_steps, cnn $cnn_steps (after $warmup warmup); raw JSON: $out"
echo "load average (1 min) before: $load_before, after: $(cut -d' ' -f1 /proc/loadavg);" \
     "$(nproc) cores; OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
if [ "$use_torch" -eq 1 ]; then
  echo "pytorch $("${torch_cmd[@]}" -c 'import torch; print(torch.__version__)' 2>/dev/null), BLAS for Linear: ${torch_blas:-unknown}"
  case "$torch_blas" in
    */blas/libblas.so*)
      echo "warning: that is the netlib reference BLAS (unoptimised): PyTorch's Linear layers are" \
           "far slower than in a normal PyTorch install; see --torch-lib-dir in --help" ;;
  esac
fi
