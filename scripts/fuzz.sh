#!/usr/bin/env bash
# Fuzzes dtrain's parsers of outside bytes (tests/fuzz: libFuzzer with ASan and
# UBSan): configures and builds the targets with clang in build-fuzz
# (-DDTRAIN_FUZZ=ON), then runs each target for SECONDS (-max_total_time) on a fresh
# copy of its seed corpus (tests/fuzz/make_seeds.py), one after the other. Prints,
# per target, the inputs executed, the coverage (libFuzzer's last cov: and ft:) and
# the crashes; a crash (also a leak, a timeout, running out of memory, or a failed
# check of the target) makes it exit 1, and the input that caused it is kept under
# build-fuzz/fuzz-runs/<target>/ (its path is printed; rerun it with
# build-fuzz/fuzz/fuzz_<target> <input>).
#
#   scripts/fuzz.sh SECONDS [TARGET...]    TARGET: job_config, tf_config, slurm, ... (default: all)
#
# Environment: DTRAIN_FUZZ_JOBS build jobs (default 2); DTRAIN_FUZZ_ARGS more libFuzzer
# flags (e.g. "-max_len=65536"); CXX the clang++ to use (default clang++).
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=()
for f in tests/fuzz/fuzz_*.cpp; do
  name=${f##*/fuzz_}
  all_targets+=("${name%.cpp}")
done
usage() {
  echo "usage: scripts/fuzz.sh SECONDS [TARGET...]" >&2
  echo "targets: ${all_targets[*]}" >&2
  exit 2
}
[ $# -ge 1 ] || usage
seconds=$1
shift
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then usage; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  printf '%s\n' "${all_targets[@]}" | grep -qx -- "$t" || { echo "fuzz.sh: unknown target '$t'" >&2; usage; }
done

# Build (clang only: libFuzzer).
cxx=${CXX:-$(command -v clang++-14 || echo clang++)}
case "$("$cxx" --version 2>/dev/null | head -1)" in
  *clang*) ;;
  *) echo "fuzz.sh: '$cxx' is not clang; libFuzzer needs clang (set CXX=clang++)" >&2; exit 2 ;;
esac
build="build-fuzz"
if [ ! -f "$build/CMakeCache.txt" ]; then
  mkdir -p "$build"
  CXX="$cxx" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DDTRAIN_FUZZ=ON -DDTRAIN_BUILD_TESTS=OFF \
    -DDTRAIN_CUDA=OFF >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
fi
executables=("${targets[@]/#/fuzz_}")
echo "fuzz.sh: building ${executables[*]} in $build (log: $build/build.log)"
cmake --build "$build" -j"${DTRAIN_FUZZ_JOBS:-2}" --target "${executables[@]}" >"$build/build.log" 2>&1 ||
  { grep -aE 'error|Error' "$build/build.log" | head -40; exit 1; }

# Run.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
summary=()
for t in "${targets[@]}"; do
  run="$PWD/$build/fuzz-runs/$t"
  rm -rf "$run"
  mkdir -p "$run/corpus"
  python3 tests/fuzz/make_seeds.py "$t" "$run/corpus"
  echo "== fuzz_$t: ${seconds}s on $(find "$run/corpus" -type f | wc -l) seeds"
  dict=()
  case "$t" in
    job_config | tf_config | keras_model | manifest | safetensors) dict=(-dict=tests/fuzz/json.dict) ;;
  esac
  status=0
  # shellcheck disable=SC2086
  "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=30 -rss_limit_mb=2048 \
    -artifact_prefix="$run/" "${dict[@]}" ${DTRAIN_FUZZ_ARGS:-} "$run/corpus" </dev/null >"$run/log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$run/log" | tail -1 | cut -d' ' -f2 || true)
  ft=$(grep -o 'ft: [0-9]*' "$run/log" | tail -1 | cut -d' ' -f2 || true)
  artifacts=()
  for a in "$run"/crash-* "$run"/leak-* "$run"/timeout-* "$run"/oom-*; do
    [ -e "$a" ] && artifacts+=("$a")
  done
  crashes=${#artifacts[@]}
  if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi
  summary+=("$(printf '%-16s %12s %7s %7s %8s' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$crashes")")
  if [ "$crashes" -gt 0 ]; then
    failed=1
    echo "fuzz_$t: CRASH (exit $status); the end of $run/log:"
    grep -aE 'FUZZ BUG|ERROR:|runtime error|SUMMARY|Test unit written|message:' "$run/log" | head -20 | sed 's/^/  /'
    for a in "${artifacts[@]}"; do echo "  input: $a"; done
  fi
done

echo
printf '%-16s %12s %7s %7s %8s\n' target execs cov ft crashes
printf '%s\n' "${summary[@]}"
exit "$failed"
