#!/usr/bin/env bash
# Where does a dtrain CPU training step spend its time?
#
# Three views of `dtrain bench train` on one config:
#   1. oneDNN primitives: a run with DNNL_VERBOSE=1 makes oneDNN print one
#      `onednn_verbose,exec,...` line per primitive execution, ending in its
#      time in ms. The warmup steps' lines are dropped and the rest is summed
#      per primitive kind, and per (kind, implementation, propagation, shape),
#      as ms per step and % of the step time of that same run. The
#      implementation column is oneDNN's choice: jit:avx2, brgconv, gemm:jit,
#      ... are optimised kernels; ref:any (or anything starting with ref) is
#      the slow reference code.
#      "outside oneDNN" = step time - primitive time: dtrain's own loops
#      (loss, dropout, Adam, data pipeline), allocation, and call overhead.
#   2. perf: `perf record -g` of a plain run, reported by shared object and by
#      symbol (self time), plus the top symbols of the dtrain binary itself,
#      i.e. our own loops. Time in libgomp is OpenMP threads waiting
#      (spinning) at barriers, mostly idle workers between parallel regions.
#   3. optionally (--torch), the PyTorch reference (bench/torch_reference.py)
#      under DNNL_VERBOSE=1, to compare which oneDNN implementations it gets
#      for the same layers (PyTorch's Linear layers run on BLAS, not oneDNN).
#
# Usage: scripts/profile-cpu.sh [options]
#   --config FILE      job config (default configs/fashion_mnist_cnn.json)
#   --batch B          batch size (default: the config's)
#   --threads T        compute threads (default 2)
#   --steps N          profiled steps (default 30)
#   --warmup N         untimed steps first, left out of the tables (default 3)
#   --perf-steps N     timed steps of the perf run; more steps make the startup
#                      (data decoding, primitive creation) a smaller share (default 300)
#   --top K            rows per perf table (default 15)
#   --build-dir DIR    dtrain's build directory (default build; built if needed)
#   --no-perf          skip the perf view
#   --torch            add view 3 (model mlp/cnn guessed from the config's name)
#   --run-timeout S    kill any single run after S seconds (default 300)
# The perf data is kept in DIR/profile-cpu.perf.data for `perf report -i`.
# On a busy machine, OMP_WAIT_POLICY=PASSIVE in the environment stops idle
# OpenMP workers from spinning, which otherwise dominates multi-thread runs.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

config="configs/fashion_mnist_cnn.json"
batch=""
threads=2
steps=30
warmup=3
top=15
perf_steps=300
build_dir="build"
use_perf=1
use_torch=0
run_timeout=300
python="${PYTHON:-/usr/bin/python3}"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die() { echo "profile-cpu: $*" >&2; exit 2; }
need_value() { [ $# -ge 2 ] || die "$1 needs a value"; }
is_count() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ]; }

while [ $# -gt 0 ]; do
  case "$1" in
    --config) need_value "$@"; config="$2"; shift 2 ;;
    --batch) need_value "$@"; batch="$2"; shift 2 ;;
    --threads) need_value "$@"; threads="$2"; shift 2 ;;
    --steps) need_value "$@"; steps="$2"; shift 2 ;;
    --warmup) need_value "$@"; warmup="$2"; shift 2 ;;
    --top) need_value "$@"; top="$2"; shift 2 ;;
    --perf-steps) need_value "$@"; perf_steps="$2"; shift 2 ;;
    --build-dir) need_value "$@"; build_dir="$2"; shift 2 ;;
    --no-perf) use_perf=0; shift ;;
    --torch) use_torch=1; shift ;;
    --run-timeout) need_value "$@"; run_timeout="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[ -f "$config" ] || die "--config $config: no such file"
[ -z "$batch" ] || is_count "$batch" 1 || die "--batch must be a positive integer"
is_count "$threads" 1 || die "--threads must be a positive integer"
is_count "$steps" 1 || die "--steps must be a positive integer"
is_count "$warmup" 0 || die "--warmup must be a non-negative integer"
is_count "$top" 1 || die "--top must be a positive integer"
is_count "$perf_steps" 1 || die "--perf-steps must be a positive integer"
is_count "$run_timeout" 1 || die "--run-timeout must be a positive integer"

dtrain="$build_dir/dtrain"
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
echo "profile-cpu: building dtrain in $build_dir (a no-op when it is up to date)" >&2
cmake --build "$build_dir" --target dtrain -j"$(nproc)" >/dev/null || die "building dtrain failed"

# Arguments of every dtrain run but --steps, which differs for the perf run.
common_args=(bench train --config "$config" --threads "$threads" --warmup "$warmup" --json)
[ -z "$batch" ] || common_args+=(--batch "$batch")
bench_args=("${common_args[@]}" --steps "$steps")

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Summarises a DNNL_VERBOSE log ($1) of a run of $2 timed steps after $3 warmup
# steps that took $4 seconds for the timed steps. Every step runs the same
# primitive sequence, so the first warmup * (lines per step) lines are warmup.
summarize_verbose() {
  local log="$1" nsteps="$2" nwarm="$3" seconds="$4"
  grep '^onednn_verbose,exec,' "$log" >"$tmp/exec.csv" || true
  local total per_step
  total="$(wc -l <"$tmp/exec.csv")"
  if [ "$total" -eq 0 ]; then
    echo "(no oneDNN primitive executions logged)"
    return
  fi
  per_step=$((total / (nsteps + nwarm)))
  if [ $((per_step * (nsteps + nwarm))) -ne "$total" ]; then
    echo "note: $total primitive executions do not split evenly into $((nsteps + nwarm)) steps;" \
         "tables use the last $((per_step * nsteps)) lines"
  fi
  tail -n "$((per_step * nsteps))" "$tmp/exec.csv" >"$tmp/timed.csv"
  awk -F, -v steps="$nsteps" -v step_ms="$(awk -v s="$seconds" -v n="$nsteps" 'BEGIN { print 1000 * s / n }')" \
      -v per_step="$per_step" '
    # Fields: onednn_verbose,exec,engine,primitive,implementation,prop_kind,
    #         memory descriptors,attributes,auxiliary,problem,time_ms
    {
      kind = $4; impl = $5; prop = $6; shape = $(NF - 1); ms = $NF
      by_kind[kind] += ms; kind_n[kind]++
      detail = kind SUBSEP impl SUBSEP prop SUBSEP shape
      by_detail[detail] += ms; detail_n[detail]++
      all += ms
    }
    END {
      printf "step time %.3f ms (%d primitive executions per step)\n\n", step_ms, per_step
      printf "%-14s %8s %10s %8s\n", "primitive", "n/step", "ms/step", "% step"
      cmd = "sort -t\"\t\" -k3,3gr"
      for (k in by_kind)
        printf "%-14s\t%8.0f\t%10.3f\t%7.1f%%\n", k, kind_n[k] / steps, by_kind[k] / steps,
               100 * by_kind[k] / steps / step_ms | cmd
      close(cmd)
      printf "%-14s %8.0f %10.3f %7.1f%%\n", "all oneDNN", per_step, all / steps, 100 * all / steps / step_ms
      out = step_ms - all / steps
      printf "%-14s %8s %10.3f %7.1f%%\n\n", "outside oneDNN", "", out, 100 * out / step_ms
      printf "%-12s %-12s %-17s %8s %9s %7s  %s\n", "primitive", "impl", "prop", "n/step", "ms/step",
             "% step", "shape"
      for (d in by_detail) {
        split(d, f, SUBSEP)
        printf "%-12s\t%-12s\t%-17s\t%8.0f\t%9.3f\t%6.1f%%\t%s\n", f[1], f[2], f[3], detail_n[d] / steps,
               by_detail[d] / steps, 100 * by_detail[d] / steps / step_ms, f[4] | cmd
      }
      close(cmd)
    }' "$tmp/timed.csv" | tr '\t' ' '
  if grep -q ',ref' <(cut -d, -f5 "$tmp/timed.csv"); then
    echo
    echo "note: rows with impl ref* are oneDNN's reference (unoptimised) implementations"
  fi
}

json_seconds() { sed -nE 's/.*"seconds": *([0-9.eE+-]+).*/\1/p' <<<"$1"; }

echo "== dtrain ${bench_args[*]}"
echo "   (OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}; load average: $(cut -d' ' -f1-3 /proc/loadavg))"
plain="$(timeout "$run_timeout" "$dtrain" "${bench_args[@]}")" || die "plain run failed or timed out"
echo "plain run:   $plain"

echo
echo "== 1. oneDNN primitives (DNNL_VERBOSE=1; per timed step)"
DNNL_VERBOSE=1 timeout "$run_timeout" "$dtrain" "${bench_args[@]}" >"$tmp/verbose.log" 2>&1 \
  || die "verbose run failed or timed out"
vjson="$(grep '^{' "$tmp/verbose.log" | tail -n 1)"
echo "verbose run: $vjson"
summarize_verbose "$tmp/verbose.log" "$steps" "$warmup" "$(json_seconds "$vjson")"

if [ "$use_perf" -eq 1 ]; then
  echo
  echo "== 2. perf (self time, all threads; plain run)"
  if ! command -v perf >/dev/null; then
    echo "perf is not installed (apt-get install linux-perf); skipped"
  else
    perf_data="$build_dir/profile-cpu.perf.data"
    perf_args=("${common_args[@]}" --steps "$perf_steps")
    if ! timeout "$run_timeout" perf record -q -g -o "$perf_data" -- "$dtrain" "${perf_args[@]}" \
        >"$tmp/perf.out" 2>"$tmp/perf.err"; then
      echo "perf record failed (perf_event_paranoid is $(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo '?')):"
      tail -n 5 "$tmp/perf.err"
    else
      echo "perf run:    $(grep '^{' "$tmp/perf.out" | tail -n 1)"
      echo "(samples cover the whole process, startup included: $perf_steps timed steps + warmup)"
      report() { perf report -i "$perf_data" --no-children -g none --stdio "$@" 2>/dev/null \
                   | grep -v '^#' | grep -v '^$' || true; }
      report --sort dso >"$tmp/dso.txt"
      echo
      echo "-- by shared object"
      head -n "$top" "$tmp/dso.txt"
      echo
      echo "-- summary"
      awk '{ pct = $1; sub("%", "", pct); dso = $2 }
        dso == "[JIT]" || dso ~ /^libdnnl/ { onednn += pct; next }
        dso ~ /^libgomp/ { gomp += pct; next }
        dso == "'"$(basename "$dtrain")"'" { own += pct; next }
        dso ~ /^libz/ { zlib += pct; next }
        dso ~ /^\[kernel/ { kern += pct; next }
        { other += pct }
        END {
          printf "oneDNN (JIT code + libdnnl)          %6.2f%%\n", onednn
          printf "outside oneDNN                       %6.2f%%\n", 100 - onednn
          printf "  dtrain binary (our own loops)      %6.2f%%\n", own
          printf "  libgomp (OpenMP threads waiting)   %6.2f%%\n", gomp
          printf "  libz (data set decoding, startup)  %6.2f%%\n", zlib
          printf "  kernel (page faults, scheduling)   %6.2f%%\n", kern
          printf "  other (libc, libm, libstdc++, ...) %6.2f%%\n", other
        }' "$tmp/dso.txt"
      echo
      echo "-- top named symbols (oneDNN's JIT code and stripped libdnnl addresses are in the table above)"
      # Written to files first: `head` closing a pipe early would fail the pipeline.
      report --sort dso,sym | grep -v '\] 0x' >"$tmp/sym.txt" || true
      head -n "$top" "$tmp/sym.txt"
      echo
      echo "-- top symbols in $(basename "$dtrain") itself (our own code)"
      report --sort sym --dsos "$(basename "$dtrain")" >"$tmp/own.txt"
      head -n "$top" "$tmp/own.txt"
      echo
      echo "perf data: $perf_data (perf report -i $perf_data)"
    fi
  fi
fi

if [ "$use_torch" -eq 1 ]; then
  echo
  echo "== 3. PyTorch reference under DNNL_VERBOSE=1 (oneDNN primitives only; Linear runs on BLAS)"
  case "$(basename "$config")" in
    *cnn*) model=cnn ;;
    *mlp*) model=mlp ;;
    *) die "--torch: cannot tell the model (mlp or cnn) from $config" ;;
  esac
  if ! timeout 60 "$python" -c 'import torch' >/dev/null 2>&1; then
    echo "PyTorch is not installed for $python (apt-get install python3-torch); skipped"
  else
    tbatch="${batch:-$(sed -nE '/"batch_size_per_replica"/{s/.*"batch_size_per_replica": *([0-9]+).*/\1/p;q}' "$config")}"
    DNNL_VERBOSE=1 timeout "$run_timeout" "$python" bench/torch_reference.py --model "$model" \
      --batch "$tbatch" --threads "$threads" --steps "$steps" --warmup "$warmup" >"$tmp/torch.log" 2>&1 \
      || die "PyTorch run failed or timed out"
    tjson="$(grep '^{' "$tmp/torch.log" | tail -n 1)"
    echo "pytorch run: $tjson"
    summarize_verbose "$tmp/torch.log" "$steps" "$warmup" "$(json_seconds "$tjson")"
  fi
fi
