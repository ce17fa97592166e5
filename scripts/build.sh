#!/usr/bin/env bash
# Installs the dependencies (scripts/install-deps.sh), configures and builds dtrain
# in build/ (Release). Safe to run again: every step is incremental.
# Usage: scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
