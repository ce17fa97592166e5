// StrategySpec: the typed `strategy` section of a job (tf.distribute's names),
// read through the strategy registry (registry.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/section.h"

namespace dtrain::strategy {

struct StrategyEntry;  // registry.h

// strategy.communication, TF's CommunicationImplementation: how the training
// tasks' all-reduce runs. auto: Gloo's own choice; ring: Gloo's ring by name.
// ("nccl" is refused while no build has an NCCL communicator.)
enum class Communication { kAuto, kRing };

struct StrategySpec {
  std::string path = "strategy";
  const StrategyEntry* type = nullptr;  // nullptr until read: one_device
  // Strategies with local replicas (mirrored): the replicas in this process, from
  // `devices` (["cpu:0", "cpu:1"], like TF's logical devices) or `replicas` (N).
  std::vector<std::string> devices;
  int64_t replicas = 1;
  Communication communication = Communication::kAuto;
  int64_t bytes_per_pack = 25 << 20;  // gradient bucket size (PyTorch DDP's 25 MiB); 0 = auto
};

// The registry entry of `spec` (one_device when the section was absent).
const StrategyEntry& entry_of(const StrategySpec& spec);

// Reads the strategy section; an absent section is StrategySpec{} (one_device).
StrategySpec read_strategy_spec(const config::Value& value);

}  // namespace dtrain::strategy
