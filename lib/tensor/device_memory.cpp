// The registry of device_memory.h: one DeviceMemory per device type, set by the
// backend that serves it.
#include "tensor/device_memory.h"

#include <atomic>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain {
namespace {

std::atomic<DeviceMemory*> g_cuda_memory{nullptr};

}  // namespace

DeviceMemory& device_memory(DeviceType type) {
  DeviceMemory* memory = type == DeviceType::kCuda ? g_cuda_memory.load() : nullptr;
  if (!memory)
    throw ConfigError(str("no backend serves ", type == DeviceType::kCuda ? "cuda" : "this",
                          " tensors in this process: select the device first (\"device\" in the job config), "
                          "or build dtrain with the CUDA backend"));
  return *memory;
}

void register_device_memory(DeviceType type, DeviceMemory* memory) {
  if (type == DeviceType::kCuda) g_cuda_memory.store(memory);
}

}  // namespace dtrain
