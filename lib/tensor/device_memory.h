// DeviceMemory: what a device backend provides so that Tensor can keep storage on
// its device (allocate, free, copy, fill). The CPU's is built in; the CUDA
// backend (kernels/cuda) registers its own when a GPU is first used, so this
// module never includes a CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/device.h"

namespace dtrain {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Bytes on `device`, zero-filled when `zero`; throws RuntimeError when out of memory.
  virtual void* allocate(const Device& device, size_t bytes, bool zero) = 0;
  virtual void deallocate(const Device& device, void* p, size_t bytes) = 0;
  // Copies `bytes` between host and device or within the device. The copy is
  // ordered after every op already issued on the device; a copy to the host
  // returns once the bytes are there.
  virtual void copy(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                    size_t bytes) = 0;
  // Copies host bytes into a newly allocated `dst` without waiting for the copy
  // (from pinned staging memory, on a copy stream); ops issued afterwards on the
  // device wait for it. `src` may be freed as soon as this returns.
  virtual void upload_new(const Device& device, void* dst, const void* src, size_t bytes) = 0;
  virtual void fill(const Device& device, float* p, int64_t count, float value) = 0;
};

// The memory functions for a device type; throws ConfigError when that backend is
// not active (e.g. a CUDA tensor in a CPU-only build).
DeviceMemory& device_memory(DeviceType type);
// Called by a backend when it becomes usable.
void register_device_memory(DeviceType type, DeviceMemory* memory);

}  // namespace dtrain
