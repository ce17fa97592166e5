// Implementation of replica_devices.h.
#include "strategy/planning/replica_devices.h"

#include <algorithm>

#include "core/error.h"
#include "core/strings.h"
#include "strategy/registry.h"

namespace dtrain::strategy {

bool devices_name_gpus(const StrategySpec& spec) {
  size_t gpus = 0;
  for (const std::string& name : spec.devices)
    if (!Device::parse(name).is_cpu()) ++gpus;
  if (gpus != 0 && gpus != spec.devices.size())
    throw ConfigError(str(spec.path, ".devices: [", join(spec.devices, ", "),
                          "] mixes CPU and GPU names; the replicas of one process are all on the CPU or one per GPU"));
  return gpus != 0;
}

std::vector<Device> replica_devices(const StrategySpec& spec, const Device& device, int replicas, int gpu_count) {
  const bool named_gpus = devices_name_gpus(spec);
  if (device.is_cpu()) {
    if (named_gpus)
      throw ConfigError(str(spec.path, ".devices names GPUs, but the job trains on ", device.str(),
                            " (\"device\": \"cpu\", or no usable GPU on this machine: `dtrain devices` says why); "
                            "name \"cpu:N\" devices, or run where the GPUs are"));
    return std::vector<Device>(static_cast<size_t>(std::max(1, replicas)), device);
  }
  if (!spec.devices.empty() && !named_gpus)
    throw ConfigError(str(spec.path, ".devices names CPU devices, but the job trains on ", device.str(),
                          "; name GPUs (\"gpu:0\", \"gpu:1\") or set \"device\": \"cpu\""));
  if (replicas <= 1 && !named_gpus) return {device};
  const std::string name = entry_of(spec).name;
  if (replicas > 1 && !entry_of(spec).gpu_per_replica)
    throw ConfigError(str(spec.path, ": ", name, " with ", replicas, " replicas on GPUs is not built (one GPU per "
                          "process; only mirrored puts one replica on each of several GPUs); use mirrored, or one "
                          "task per GPU (multi_worker_mirrored under dtrain launch gives each local task its own "
                          "GPU), or \"device\": \"cpu\""));
  std::vector<Device> out;
  for (int i = 0; i < std::max(1, replicas); ++i)
    out.push_back(named_gpus ? Device::parse(spec.devices[static_cast<size_t>(i)]) : Device::cuda(device.index + i));
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].index >= gpu_count)
      throw ConfigError(str(spec.path, ": mirrored with ", replicas, " replicas needs ", out[i].str(),
                            ", but this machine has ", gpu_count, " usable GPU", gpu_count == 1 ? "" : "s",
                            named_gpus ? "; name existing GPUs in devices" : "; lower replicas",
                            " or set \"device\": \"cpu\""));
    for (size_t j = 0; j < i; ++j)
      if (out[j] == out[i])
        throw ConfigError(str(spec.path, ".devices names ", out[i].str(),
                              " twice; each replica needs a GPU of its own"));
  }
  return out;
}

}  // namespace dtrain::strategy
