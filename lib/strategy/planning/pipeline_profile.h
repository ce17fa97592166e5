// The pipeline's profiler: strategy.stages "auto" balances the stages by each
// layer's forward + backward time, measured by the chief on a few steps of the
// whole model with one micro-batch and broadcast, so every task takes the same
// split.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "strategy/planning/pipeline_stages.h"
#include "strategy/strategy_spec.h"

namespace dtrain::strategy {

// Forward + backward seconds of each top-level layer of the whole model on
// micro-batches of `rows` random samples: the mean of `steps` profiled steps
// after one warm-up step (primitive creation).
std::vector<double> measure_layer_seconds(const StrategyJob& job, int64_t rows, int steps);

// The split of "auto" stages over `workers` (collective): by measured time where
// every task says the whole model fits it (`whole_model_fits`: runtime.memory_limit),
// else `by_bytes` (the split by parameter bytes) on every task.
StageSplit measured_split(const StrategyJob& job, comm::Communicator& workers, bool whole_model_fits,
                          const StageSplit& by_bytes);

}  // namespace dtrain::strategy
