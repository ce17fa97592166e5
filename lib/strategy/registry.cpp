// The table of strategies (registry.h): one line each.
#include "strategy/registry.h"

#include "core/error.h"
#include "core/strings.h"
#include "strategy/data_parallel.h"

namespace dtrain::strategy {
namespace {

std::unique_ptr<Strategy> data_parallel(const StrategyJob& job, const StrategyContext& context) {
  return std::make_unique<DataParallelStrategy>(job, context);
}

std::unique_ptr<Strategy> central_storage(const StrategyJob& job, const StrategyContext& context) {
  return std::make_unique<DataParallelStrategy>(job, context, Combine::kCentral);
}

}  // namespace

const std::vector<StrategyEntry>& strategies() {
  static const std::vector<StrategyEntry> table = {
      {"one_device", "one replica on one device", CrossTask::kNothing, false, data_parallel},
      {"mirrored", "N replicas on threads of one process, gradients averaged in shared memory",
       CrossTask::kNothing, true, data_parallel},
      {"multi_worker_mirrored", "one replica per training task, gradients averaged with a bucketed all-reduce",
       CrossTask::kAllReduce, false, data_parallel},
      {"central_storage",
       "N replicas on threads of one process read one central copy of the variables on the host; their mean "
       "gradient updates it once per step",
       CrossTask::kNothing, true, central_storage},
      {"parameter_server", "variables on ps tasks, asynchronous workers (not built yet)", CrossTask::kNothing,
       false, nullptr},
  };
  return table;
}

const std::vector<config::KeyDoc>& strategy_keys() {
  static const std::vector<config::KeyDoc> keys = {
      {"type", "`one_device` (default), `mirrored`, `multi_worker_mirrored`, `central_storage`; "
               "`parameter_server` is recognised but not built yet"},
      {"replicas", "mirrored, central_storage: N replicas in this process (1)"},
      {"devices", "mirrored, central_storage: the replicas as device names, e.g. `[\"cpu:0\", \"cpu:1\"]` (TF's logical devices)"},
      {"communication", "`auto` (Gloo's own choice, today its ring) or `ring` (Gloo's ring by name); `nccl` is "
                        "refused until the NCCL communicator exists"},
      {"bytes_per_pack", "gradient bucket size in bytes (25 MiB, PyTorch DDP's); 0 = auto"}};
  return keys;
}

std::vector<std::string> available_strategy_names() {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategies())
    if (e.available()) names.push_back(e.name);
  return names;
}

const StrategyEntry& entry_of(const StrategySpec& spec) { return spec.type ? *spec.type : strategies().front(); }

StrategySpec read_strategy_spec(const config::Value& value) {
  StrategySpec strategy;
  strategy.path = value.path().empty() ? "strategy" : value.path();
  config::Section r(value, "the strategy section");
  r.expect_keys(config::key_names(strategy_keys()));
  const StrategyEntry& entry =
      find_strategy(r.get_choice("type", "one_device", config::entry_names(strategies()), "strategy type"));
  strategy.type = &entry;
  if (!entry.available())
    r.fail("type", str("'", entry.name, "' is not available in this version of dtrain; available: ",
                       join(available_strategy_names(), ", ")));
  const auto devices = r.find("devices");
  const bool has_replicas = r.has("replicas");
  if ((devices || has_replicas) && !entry.local_replicas)
    r.fail(devices ? "devices" : "replicas",
           str("only mirrored and central_storage take several replicas in one process; '", entry.name,
               "' runs one replica per task"));
  if (devices && has_replicas) r.fail("replicas", "give either 'devices' or 'replicas', not both");
  if (devices) {
    strategy.devices = devices->to_string_list();
    for (size_t i = 0; i < strategy.devices.size(); ++i) {
      const std::string& d = strategy.devices[i];
      if (d.rfind("cpu", 0) != 0 && d.rfind("gpu", 0) != 0 && d.rfind("cuda", 0) != 0)
        devices->at(i).fail(str("'", d, "' is not a device; use names like \"cpu:0\", \"cpu:1\""));
    }
    strategy.replicas = static_cast<int64_t>(strategy.devices.size());
  }
  strategy.replicas = r.get_int("replicas", strategy.replicas, 1);
  const std::string communication =
      r.get_choice("communication", "auto", {"auto", "ring", "nccl"}, "communication implementation");
  if (communication == "nccl")
    r.fail("communication",
           "'nccl' is not available yet: no build of dtrain has an NCCL communicator so far (it is planned); "
           "use \"auto\" or \"ring\" (Gloo; a GPU job's gradients then go through host memory)");
  strategy.communication = communication == "ring" ? Communication::kRing : Communication::kAuto;
  strategy.bytes_per_pack = r.get_int("bytes_per_pack", strategy.bytes_per_pack, 0);
  r.finish();
  return strategy;
}

void check_cluster_roles(const StrategySpec& strategy, const config::ClusterSpec& cluster, const std::string& source) {
  if (cluster.empty()) return;
  const StrategyEntry& entry = entry_of(strategy);
  const int training = cluster.world_size();
  const int ps = cluster.count("ps");
  const std::string where = str(strategy.path, ".type '", entry.name, "': ");
  if (entry.cross_task == CrossTask::kNothing && training > 1)
    throw ConfigError(str(where, "the cluster (", source, ") has ", training,
                          " training tasks (chief and workers), but this strategy trains in one task: they would "
                          "train independent models; set strategy.type to multi_worker_mirrored or parameter_server, "
                          "or run one task"));
  if (entry.cross_task != CrossTask::kParameterServer && ps > 0)
    throw ConfigError(str(where, "the cluster (", source, ") has ", ps,
                          " ps task(s), but this strategy keeps no variables on ps tasks: they would idle; remove "
                          "cluster.ps or set strategy.type to parameter_server"));
  if (entry.cross_task == CrossTask::kParameterServer) {
    if (ps == 0)
      throw ConfigError(str(where, "the cluster (", source,
                            ") has no ps task to hold the variables; add cluster.ps (`dtrain launch --ps 1`)"));
    if (cluster.count("worker") - (cluster.count("chief") == 0 ? 1 : 0) < 1)
      throw ConfigError(str(where, "the cluster (", source,
                            ") has no worker besides the coordinator (the chief, or worker:0 without one) to "
                            "compute; add a worker"));
  }
}

const StrategyEntry& find_strategy(const std::string& name) {
  return config::find_entry(strategies(), name, "strategy");
}

}  // namespace dtrain::strategy
