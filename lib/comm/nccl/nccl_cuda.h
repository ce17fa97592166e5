// CUDA helpers of the NCCL target, internal to lib/comm's nccl_*.cpp (the only
// comm files that include CUDA headers): a checked CUDA call and a guard that
// makes a GPU current on the calling thread for a scope.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace dtrain::comm {

// Throws CudaError naming the call, CUDA's error and `where` when status is not cudaSuccess.
void check_cuda(cudaError_t status, const char* call, const std::string& where);

// Makes `device` current on this thread for the guard's lifetime and puts the
// previous one back (the compute code's thread may be bound to its own GPU).
class DeviceGuard {
 public:
  DeviceGuard(int device, const std::string& where);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

}  // namespace dtrain::comm
