// StrategySpec: the typed `strategy` section of a job (tf.distribute's names),
// what lib/strategy and the runtime read. Parsed and checked by job_config.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::config {

// strategy.communication, TF's CommunicationImplementation: how the training
// tasks' all-reduce runs. auto: Gloo's own choice; ring: Gloo's ring by name;
// nccl: NCCL (not built yet; an error in every build).
enum class Communication { kAuto, kRing, kNccl };

struct StrategySpec {
  std::string path = "strategy";
  std::string type = "one_device";  // one_device | mirrored | multi_worker_mirrored
  // mirrored: the replicas in this process, from `devices` (["cpu:0", "cpu:1"], like
  // TF's logical devices) or `replicas` (N); 1 for the other strategies.
  std::vector<std::string> devices;
  int64_t replicas = 1;
  Communication communication = Communication::kAuto;
  int64_t bytes_per_pack = 25 << 20;   // gradient bucket size (PyTorch DDP's 25 MiB); 0 = auto
};

}  // namespace dtrain::config
