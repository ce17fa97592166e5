#!/usr/bin/env bash
# The test suites under the sanitizers (DESIGN.md "Tests": ASan+UBSan and TSan
# builds run the suites). Exits 0 only when every test passed and no sanitizer
# wrote a report.
#
#   build-asan  AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover:
#               UB aborts) + LeakSanitizer, plus libstdc++'s assertions
#               (_GLIBCXX_ASSERTIONS: bounds of vector[] ...). Runs the tests labelled
#               unit and integration, less the `slow` ones (test_accuracy: the full
#               trainings to the accuracy targets, too long under ASan; the
#               integration tests train every model kind on small jobs) and the
#               `gpu` ones (no CUDA in these builds, see below).
#   build-tsan  ThreadSanitizer. Runs the tests of the modules whose threads talk:
#               comm (Gloo's sends thread, the shared-memory barriers), strategy and
#               ps (the gradient reducer's communication thread, the replica pool,
#               pipeline links, the ps server's I/O thread), rendezvous (store
#               server, heartbeats), launch (child processes and their output
#               readers), data and trainer (the prefetch thread); and, with real
#               dtrain processes, test_cluster_runtime (heartbeats, lost peers),
#               test_cluster_launch, test_data_parallel and test_pipeline.
#
# The integration tests spawn the dtrain binary of their own build directory (its
# path is compiled in: DTRAIN_BINARY), so those processes are sanitized too. Every
# report, of a test or of a process it started, goes to a file
# build-<san>/sanitizer-logs/<san>.<pid> (log_path): a report in a child whose exit
# code no test looks at still fails this script; the reports are printed at the end.
# A sanitizer's exit code is 66, which dtrain never uses.
#
# Choices:
# - clang 14 rather than gcc 12: it compiled these sources about 2.5x faster with
#   the sanitizers. -O1 with line tables only (file:line in the stacks, small
#   objects). CUDA off (-DDTRAIN_CUDA=OFF): host sanitizers do not see device code,
#   and nvcc would only lengthen the build. Only the executables that run are built.
# - Not built: test_gpu_* (label gpu), test_accuracy (label slow) and
#   test_cuda_bodies (the CUDA kernels' bodies run on the host; it uses C++20's
#   class template argument deduction for aggregates, which clang 14 lacks; the
#   main build runs it).
# - OpenMP: oneDNN (Debian's libdnnl) runs on GCC's libgomp, so these builds link
#   libgomp as well (clang's default libomp would put two OpenMP runtimes into one
#   process). Clang generates no code for `#pragma omp` with libgomp, so here
#   dtrain's own OpenMP loops run on the calling thread: their bodies are checked,
#   the split of their iterations between threads is not. The only libgomp threads
#   are then oneDNN's; their code is not instrumented (TSan sees neither its
#   accesses nor libgomp's futex synchronisation), and OMP_NUM_THREADS is left as it
#   is (tests check the thread count dtrain picks by itself). No report came from
#   them; tests/sanitizers/tsan.supp suppresses what oneDNN's own synchronisation
#   hides from TSan (third-party code only, a reason for each; LeakSanitizer needed
#   none).
#
# Usage: scripts/test-sanitizers.sh [asan] [tsan]       (no argument: both)
# Environment: DTRAIN_SAN_JOBS, build and ctest parallelism (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

jobs=${DTRAIN_SAN_JOBS:-$(nproc)}
cxx=clang++-14
libgomp=$(g++ -print-file-name=libgomp.so)
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(asan tsan)

# The executables of the TSan run (ctest names them "<exe>: <case>" or "<exe>@avx2: <case>").
tsan_exes='test_comm|test_comm_groups|test_nccl_support|test_strategy|test_zero|test_ps|test_rendezvous|test_launch'
tsan_exes+='|test_data|test_trainer|test_cluster_runtime|test_cluster_launch|test_data_parallel|test_pipeline'

# lib/kernels/cpu puts [[gnu::target_clones("avx2", "default")]] on function
# templates, which clang 14 refuses ("not yet support function templates"). This
# renames the attribute into one that clang ignores, so those functions are built
# for the baseline ISA only (their comments say both clones give the same bits).
clang_compat="-Dtarget_clones=dtrain_sanitizers_skip_target_clones -Wno-unknown-attributes"

# configure_and_build <dir> <sanitizers> <more compile flags> <wanted> <skipped>:
# builds the executables whose target names match the regex <wanted> and not
# <skipped> (dtrain comes with every test: the tests depend on it).
configure_and_build() {
  local dir=$1 sanitize=$2 more=$3 wanted=$4 skipped=$5
  local start=$SECONDS
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER="$cxx" -DDTRAIN_CUDA=OFF \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only -fno-omit-frame-pointer $sanitize $more $clang_compat" \
    -DCMAKE_EXE_LINKER_FLAGS="$sanitize" -DCMAKE_SHARED_LINKER_FLAGS="$sanitize" \
    -DOpenMP_CXX_FLAGS=-fopenmp=libgomp -DOpenMP_CXX_LIB_NAMES=gomp -DOpenMP_gomp_LIBRARY="$libgomp" \
    >/dev/null
  local targets
  targets=$(ninja -C "$dir" -t targets all | sed -n 's/^.*: CXX_EXECUTABLE_LINKER__\(.*\)_Debug$/\1/p' |
            sort -u | grep -E "$wanted" | grep -Ev "$skipped")
  # shellcheck disable=SC2086  # one word per target
  cmake --build "$dir" -j"$jobs" --target $targets
  echo "test-sanitizers: $dir built in $((SECONDS - start)) s"
}

# check_logs <dir>: prints the reports written under <dir>/sanitizer-logs; fails if any.
check_logs() {
  local logs=("$1"/sanitizer-logs/*)
  [ -e "${logs[0]}" ] || return 0
  echo "test-sanitizers: ${#logs[@]} sanitizer report(s) in $1/sanitizer-logs:"
  local f
  for f in "${logs[@]}"; do
    echo "===== $f"
    cat "$f"
  done
  return 1
}

failed=0
for b in "${builds[@]}"; do
  case $b in
    asan)
      dir=build-asan
      configure_and_build $dir "-fsanitize=address,undefined" "-fno-sanitize-recover=all -D_GLIBCXX_ASSERTIONS" \
        '^test_' '^(test_gpu_.*|test_accuracy|test_cuda_bodies)$'
      rm -rf $dir/sanitizer-logs && mkdir -p $dir/sanitizer-logs
      common="print_stacktrace=1:exitcode=66:log_path=$root/$dir/sanitizer-logs/asan"
      start=$SECONDS
      (
        cd $dir
        export ASAN_OPTIONS="$common:detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
        export UBSAN_OPTIONS="$common:halt_on_error=1"
        ctest -L 'unit|integration' -LE 'slow|gpu' -j"$jobs" --output-on-failure
      ) || failed=1
      echo "test-sanitizers: $dir tests ran in $((SECONDS - start)) s"
      check_logs $dir || failed=1
      ;;
    tsan)
      dir=build-tsan
      configure_and_build $dir "-fsanitize=thread" "" "^($tsan_exes)\$" '^$'
      rm -rf $dir/sanitizer-logs && mkdir -p $dir/sanitizer-logs
      start=$SECONDS
      (
        cd $dir
        export TSAN_OPTIONS="exitcode=66:log_path=$root/$dir/sanitizer-logs/tsan:halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp:print_suppressions=0"
        ctest -R "^($tsan_exes)(@[a-z0-9]+)?:" -LE 'slow|gpu' -j"$jobs" --output-on-failure
      ) || failed=1
      echo "test-sanitizers: $dir tests ran in $((SECONDS - start)) s"
      check_logs $dir || failed=1
      ;;
    *)
      echo "usage: $0 [asan] [tsan]" >&2
      exit 2
      ;;
  esac
done
exit $failed
