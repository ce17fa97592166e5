// The table of strategies (registry.h): one line each.
#include "strategy/registry.h"

#include "core/error.h"
#include "core/strings.h"
#include "strategy/data_parallel.h"

namespace dtrain::strategy {
namespace {

std::unique_ptr<Strategy> data_parallel(const config::JobConfig& job, const StrategyContext& context) {
  return std::make_unique<DataParallelStrategy>(job, context);
}

}  // namespace

const std::vector<StrategyEntry>& strategies() {
  static const std::vector<StrategyEntry> table = {
      {"one_device", "one replica on one device", CrossTask::kNothing, false, data_parallel},
      {"mirrored", "N replicas on threads of one process, gradients averaged in shared memory",
       CrossTask::kNothing, true, data_parallel},
      {"multi_worker_mirrored", "one replica per training task, gradients averaged with a bucketed all-reduce",
       CrossTask::kAllReduce, false, data_parallel},
      {"central_storage", "variables on the host, replicas compute (not built yet)", CrossTask::kNothing, true,
       nullptr},
      {"parameter_server", "variables on ps tasks, asynchronous workers (not built yet)", CrossTask::kNothing,
       false, nullptr},
  };
  return table;
}

const StrategyEntry& find_strategy(const std::string& name) {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategies()) {
    if (e.name == name) return e;
    names.push_back(e.name);
  }
  throw ConfigError(str("strategy.type: unknown strategy '", name, "'; valid: ", join(names, ", ")));
}

}  // namespace dtrain::strategy
