// StrategySpec: the typed `strategy` section of a job (tf.distribute's names),
// read through the strategy registry (registry.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/section.h"
#include "ps/placement.h"
#include "ps/ps_server.h"

namespace dtrain::strategy {

struct StrategyEntry;  // registry.h

// strategy.communication, TF's CommunicationImplementation: how the training
// tasks' all-reduce runs. auto: Gloo's own choice (NCCL for a GPU job in builds
// with NCCL); ring: Gloo's ring by name; hierarchical: shared memory within a
// machine, Gloo between machines; nccl: NCCL on device buffers (GPU jobs, builds
// with NCCL: registry.h's check_communication_device).
enum class Communication { kAuto, kRing, kHierarchical, kNccl };

// strategy.allreduce_dtype: the type gradients travel in between tasks.
// bfloat16 halves the bytes; the sums are accumulated in float32 where the
// backend allows.
enum class AllreduceDType { kFloat32, kBfloat16 };

struct StrategySpec {
  std::string path = "strategy";
  const StrategyEntry* type = nullptr;  // nullptr until read: one_device
  // Strategies with local replicas (mirrored): the replicas in this process, from
  // `devices` (["cpu:0", "cpu:1"], like TF's logical devices) or `replicas` (N).
  std::vector<std::string> devices;
  int64_t replicas = 1;
  Communication communication = Communication::kAuto;
  AllreduceDType allreduce_dtype = AllreduceDType::kFloat32;
  int64_t bytes_per_pack = 25 << 20;  // gradient bucket size (PyTorch DDP's 25 MiB); 0 = auto
  // parameter_server:
  ps::UpdateMode mode = ps::UpdateMode::kAsync;  // strategy.mode: async | sync | stale
  int64_t max_staleness = 0;                     // stale: at most this many steps ahead of the slowest
  ps::PartitionerSpec partitioner;               // strategy.variable_partitioner
  int64_t steps_per_unit = 20;                   // strategy.steps_per_work_unit
};

// The registry entry of `spec` (one_device when the section was absent).
const StrategyEntry& entry_of(const StrategySpec& spec);

// Reads the strategy section; an absent section is StrategySpec{} (one_device).
StrategySpec read_strategy_spec(const config::Value& value);

}  // namespace dtrain::strategy
