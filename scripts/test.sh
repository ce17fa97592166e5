#!/usr/bin/env bash
# Quick start, command 2: sets everything up on a fresh machine, builds, and runs
# the whole test suite with ctest: unit and integration tests first (in parallel),
# then the slow ones (full trainings that check the accuracy targets) one at a time.
# Set DTRAIN_SKIP_SLOW=1 to leave the slow tests out.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
cd build
ctest -LE slow -j"$(nproc)" --output-on-failure
if [ "${DTRAIN_SKIP_SLOW:-0}" != 1 ]; then
  ctest -L slow --output-on-failure
fi
