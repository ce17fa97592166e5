// The CUDA backend's caching allocator, internal to lib/kernels/cuda: device
// memory for tensors (through DeviceMemory) and for the scratch buffers of ops.
// Freed blocks are kept by rounded size and handed out again at once, ordered by
// the compute stream; see allocator.cpp for why that is safe.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <cstddef>

namespace dtrain::kernels::cuda {

// Device memory on the calling thread's current GPU (device.h), from that GPU's
// caching allocator (not zero-filled); device_free must run with the same GPU current.
void* device_alloc(size_t bytes);
// Returns a block to the cache; never throws (it runs in tensors' destructors).
void device_free(void* p, size_t bytes);
// Makes `stream` wait until the previous user of block p (from device_alloc) is
// done with it, when that was not known yet: for writers on a stream other than
// the compute stream (the uploader).
void wait_for_block(void* p, cudaStream_t stream);

// A device buffer for the duration of one op (workspaces, partial sums).
class Scratch {
 public:
  explicit Scratch(size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }
  float* floats() const { return static_cast<float*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// The largest power of two up to 256 that divides the address: what a plan
// chosen for it (cuBLASLt, cuDNN) may assume of the pointers it runs on.
inline uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 2 && a % align != 0) align /= 2;
  return align;
}

}  // namespace dtrain::kernels::cuda
