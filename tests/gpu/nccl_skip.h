// For the gpu-labelled tests of NCCL: true in builds with NCCL, else false after
// printing the skip line (ctest's SKIP_REGULAR_EXPRESSION reports it as skipped).
#pragma once

#include <iostream>

#include "comm/nccl/nccl_support.h"

namespace dtrain::testing {

inline bool nccl_or_skip() {
  if (comm::kNcclBuilt) return true;
  std::cout << "DTRAIN-SKIPPED: this build has no NCCL" << std::endl;
  return false;
}

}  // namespace dtrain::testing
