#!/usr/bin/env bash
# Quick start, command 2: sets everything up on a fresh machine, builds, and runs
# the whole test suite with ctest: unit and integration tests first (in parallel),
# then the slow ones (full trainings that check the accuracy targets) one at a time.
# Set DTRAIN_SKIP_SLOW=1 to leave the slow tests out. After them: the sanitizer
# builds and a short fuzzing run (below). Before ctest it starts a
# one-node Slurm (scripts/slurm-local.sh: installs slurm-wlm and munge, needs root)
# for the `system` tests; without it they report skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
# A one-node Slurm on this machine for the tests labelled `system` (test_slurm runs
# dtrain under srun); when it cannot start, its reason is printed and those tests
# report skipped.
bash scripts/slurm-local.sh start ||
  echo "test.sh: no local Slurm (reason above); the Slurm test will be reported skipped"
(
  cd build
  ctest -LE slow -j"$(nproc)" --output-on-failure
  if [ "${DTRAIN_SKIP_SLOW:-0}" != 1 ]; then
    ctest -L slow --output-on-failure
  fi
)
# Then the sanitizer builds (ASan+UBSan: unit and integration suites; TSan: the
# modules whose threads talk) and every fuzz target for 30 s as a regression
# (scripts/test-sanitizers.sh, scripts/fuzz.sh: clang 14, builds of their own).
# DTRAIN_SKIP_SANITIZERS=1 / DTRAIN_SKIP_FUZZ=1 leave them out.
if [ "${DTRAIN_SKIP_SANITIZERS:-0}" != 1 ]; then
  bash scripts/test-sanitizers.sh
fi
if [ "${DTRAIN_SKIP_FUZZ:-0}" != 1 ]; then
  bash scripts/fuzz.sh 30
fi
