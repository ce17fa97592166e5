// make_strategy(): builds the Strategy that the registry has under strategy.type.
#include "strategy/strategy.h"

#include "core/error.h"
#include "core/strings.h"
#include "strategy/registry.h"

namespace dtrain::strategy {

std::unique_ptr<Strategy> make_strategy(const StrategyJob& job, const StrategyContext& context) {
  const StrategyEntry& entry = entry_of(job.strategy);
  if (!entry.available())
    throw ConfigError(str(job.strategy.path, ".type: '", entry.name,
                          "' is not available in this version of dtrain; available: ",
                          join(available_strategy_names(), ", ")));
  if (entry.cross_task == CrossTask::kAllReduce && !context.workers)
    throw ConfigError(str(job.strategy.path, ".type: ", entry.name,
                          " needs a cluster: run the job with `dtrain launch` "
                          "or give every task TF_CONFIG (one worker alone: use one_device)"));
  return entry.make(job, context);
}

}  // namespace dtrain::strategy
