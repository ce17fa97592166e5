// Where a data-parallel strategy's local replicas compute. On the CPU they all
// share the job's device (threads of one process). On GPUs each replica has a
// GPU of its own, as TF's MirroredStrategy: strategy.devices when it names GPUs
// ("gpu:0", "cuda:1"), else the job's GPU and the ones after it. Pure logic over
// the number of usable GPUs, so it is unit-tested on machines without one.
#pragma once

#include <string>
#include <vector>

#include "strategy/strategy_spec.h"
#include "tensor/device.h"

namespace dtrain::strategy {

// Whether strategy.devices names GPUs (all of them; mixing CPU and GPU names is
// a ConfigError). False when it is empty.
bool devices_name_gpus(const StrategySpec& spec);

// The device of each of `replicas` local replicas of a job on `device`, with
// `gpu_count` usable GPUs. ConfigError, saying what to change: strategy.devices
// names GPUs while the job trains on the CPU (or the other way round), a GPU
// named twice or missing, or several GPUs for a strategy other than mirrored
// (central_storage and multi_worker_mirrored keep one GPU per process).
std::vector<Device> replica_devices(const StrategySpec& spec, const Device& device, int replicas, int gpu_count);

}  // namespace dtrain::strategy
