// make_strategy(): picks the Strategy named by strategy.type.
#include "strategy/strategy.h"

#include "core/error.h"
#include "core/strings.h"
#include "strategy/data_parallel.h"

namespace dtrain::strategy {

std::unique_ptr<Strategy> make_strategy(const config::JobConfig& job, const StrategyContext& context) {
  const std::string& type = job.strategy.type;
  if (type == "multi_worker_mirrored" && !context.workers)
    throw ConfigError(str(job.strategy.path,
                          ".type: multi_worker_mirrored needs a cluster: run the job with `dtrain launch` "
                          "or give every task TF_CONFIG (one worker alone: use one_device)"));
  if (type == "one_device" || type == "mirrored" || type == "multi_worker_mirrored")
    return std::make_unique<DataParallelStrategy>(job, context);
  throw ConfigError(str(job.strategy.path, ".type: '", type,
                        "' is not available in this version of dtrain; available: one_device, mirrored, "
                        "multi_worker_mirrored"));
}

}  // namespace dtrain::strategy
