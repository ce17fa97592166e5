// How OpenMP's idle threads wait. libgomp reads OMP_WAIT_POLICY and
// GOMP_SPINCOUNT when it loads, before main(); so a command that computes,
// started without either, sets GOMP_SPINCOUNT and executes itself again (the
// same process id and arguments). Measured on 2 cores (docs/performance.md):
// OpenMP's default spin (300,000 rounds) is fastest on idle cores and 6-38x
// slower beside two busy processes; passive (no spin) costs 25-60% idle;
// 30,000 rounds keeps the idle speed and most of passive's safety.
#pragma once

namespace dtrain::app {

inline constexpr const char* kSpinCount = "30000";

// For `run`, `bench`, `generate` and `validate` (whose plan is run's) without
// OMP_WAIT_POLICY or GOMP_SPINCOUNT:
// sets GOMP_SPINCOUNT=kSpinCount and DTRAIN_OPENMP_WAIT=dtrain, then execv's
// /proc/self/exe. Returns (changing nothing) for other commands, when either is
// set, or when the exec fails.
void settle_openmp_wait(int argc, char** argv);

}  // namespace dtrain::app
