#!/usr/bin/env bash
# Installs the dependencies (scripts/install-deps.sh), configures and builds dtrain
# in build/ (Release). Safe to run again: every step is incremental.
# Usage: scripts/build.sh [--target NAME] [--log FILE] [extra cmake -D options]
#   --target NAME  build only that target (scripts/demo.sh: dtrain, not the tests)
#   --log FILE     quiet: one line per stage here, everything else into FILE (the
#                  end of it is printed when a stage fails)
set -euo pipefail
cd "$(dirname "$0")/.."

target=()
log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target=(--target "$2"); shift 2 ;;
    --log) log="$2"; shift 2 ;;
    *) break ;;
  esac
done

# stage TEXT COMMAND...: runs COMMAND; with --log, says TEXT and sends the output to the log.
stage() {
  local text=$1
  shift
  if [ -z "$log" ]; then
    "$@"
    return
  fi
  local t0=$SECONDS
  printf 'build: %s ... ' "$text"
  if "$@" >>"$log" 2>&1; then
    echo "done ($(( SECONDS - t0 )) s)"
  else
    local rc=$?
    echo "FAILED (exit $rc); the end of $log:"
    tail -25 "$log"
    exit "$rc"
  fi
}

[ -z "$log" ] || { mkdir -p "$(dirname "$log")"; : >"$log"; }
stage "dependencies (scripts/install-deps.sh)" bash scripts/install-deps.sh
configure() { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null; }  # (its errors go to stderr)
stage "configure (cmake, Release)" configure "$@"
stage "compile ${target[1]:-everything} on $(nproc) cores" cmake --build build -j"$(nproc)" "${target[@]}"
