// make_strategy(): builds the Strategy that the registry has under strategy.type
// (refusing loss scaling where the strategy cannot agree on skipped steps).
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
  if (loss_scaling_on(job, context) && !entry.scales_loss)
    throw ConfigError(str(job.train.path, ".precision: mixed_float16 needs dynamic loss scaling, which ", entry.name,
                          " does not do (its updates happen away from the replicas' skip decision); use "
                          "\"mixed_bfloat16\" (no loss scaling needed), or strategy.type mirrored or "
                          "multi_worker_mirrored"));
  return entry.make(job, context);
}

std::vector<std::string> Strategy::state_names_to_load() {
  std::vector<std::string> names;
  for (const nn::Param* p : model().params()) names.push_back(p->name);
  for (const nn::Param* p : optimizer().state()) names.push_back(p->name);
  return names;
}

void load_named(const std::vector<nn::Param*>& into, const Strategy::TensorLookup& lookup, const char* what) {
  for (nn::Param* p : into) {
    const Tensor* t = lookup(p->name);
    if (!t)
      throw ConfigError(str("the checkpoint's ", what, " has no tensor '", p->name,
                            "': it was written for another model or optimizer"));
    if (t->shape() != p->value.shape())
      throw ConfigError(str("the checkpoint's ", what, " tensor '", p->name, "' has shape ", shape_str(t->shape()),
                            " but the model needs ", shape_str(p->value.shape())));
    p->value.copy_from(*t);
  }
}

bool loss_scaling_on(const StrategyJob& job, const StrategyContext& context) {
  return context.loss_scaling || job.train.precision == config::Precision::kMixedFloat16;
}

}  // namespace dtrain::strategy
