// For the gpu-labelled tests: selects the GPU once (or also needs a second),
// or prints DTRAIN-SKIPPED (which ctest's SKIP_REGULAR_EXPRESSION turns into
// "skipped") and says why.
#pragma once

#include <iostream>

#include "kernels/device.h"

namespace dtrain::testing {

// True when a GPU is selected and usable; false (after printing the skip line) otherwise.
inline bool gpu_or_skip() {
  static const bool usable = [] {
    const kernels::GpuReport report = kernels::list_gpus();
    if (report.gpus.empty()) {
      std::cout << "DTRAIN-SKIPPED: no usable GPU: " << report.why_none << std::endl;
      return false;
    }
    kernels::select_device("gpu");
    return true;
  }();
  if (!usable) std::cout << "DTRAIN-SKIPPED: no usable GPU" << std::endl;
  return usable;
}

// True with a usable GPU and at least a second one; else false after printing
// the skip line "needs two GPUs (<why>)", which scripts/test-gpu.sh tolerates.
inline bool two_gpus_or_skip(const char* why) {
  if (!gpu_or_skip()) return false;
  if (kernels::list_gpus().gpus.size() >= 2) return true;
  std::cout << "DTRAIN-SKIPPED: needs two GPUs (" << why << ")" << std::endl;
  return false;
}

}  // namespace dtrain::testing
