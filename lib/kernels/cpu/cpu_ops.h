// The CPU backend's op functions: ops.h's signatures (backend_ops.inc) in
// dtrain::kernels::cpu. ops.cpp dispatches here for tensors on the CPU. Not
// included outside lib/kernels.
#pragma once

#include <string>

#include "kernels/ops.h"

namespace dtrain::kernels::cpu {

void set_num_threads(int threads);
int num_threads();
std::string library_version();  // "oneDNN 2.6.3"

#include "kernels/backend_ops.inc"

}  // namespace dtrain::kernels::cpu
