// Where a pipeline's stages begin: strategy.stages read against the model's
// layers (names where each stage after the first begins), or split automatically
// by per-layer cost (measured time, else parameter bytes) so the stages are as
// even as contiguous runs of layers allow.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "nn/sequential.h"
#include "strategy/strategy_spec.h"

namespace dtrain::strategy {

// A stage split: stage s holds layers [starts[s], starts[s + 1]) (the last up to
// the model's end). starts[0] == 0, strictly increasing.
struct StageSplit {
  std::vector<size_t> starts;
  std::string how;  // "strategy.stages", "auto: measured time", "auto: parameter bytes"
  size_t stages() const { return starts.size(); }
  size_t end_of(size_t stage, size_t layers) const { return stage + 1 < starts.size() ? starts[stage + 1] : layers; }
};

// The stage count a pipeline job needs: strategy.stages' entries + 1, or with
// "auto" the training tasks / (data_parallel x tensor_parallel). ConfigError
// (exit 2, with the fix) when tasks != stages x data_parallel x tensor_parallel.
int pipeline_stage_count(const StrategySpec& strategy, int training_tasks);
// The copies of the pipeline: strategy.data_parallel, or where it was not given
// the rest of the training tasks (tasks / (stages x tensor_parallel) with named
// stages, at least 1; 1 with "auto").
int pipeline_copies(const StrategySpec& strategy, int training_tasks);

// The split strategy.stages names (ConfigError naming the entry for a name that
// is not a top-level layer, a list out of model order, the first layer, or more
// stages than layers).
StageSplit named_split(const StrategySpec& strategy, const std::vector<nn::LayerInfo>& layers);

// The contiguous split of layers with `cost` each into `stages` parts whose
// largest part is smallest (ties: the earliest boundaries). ConfigError when
// there are fewer layers than stages.
StageSplit balanced_split(const std::vector<double>& cost, int stages, const std::string& how);

// The split of a pipeline job with `training_tasks` tasks: strategy.stages, or
// "auto" balanced by parameter bytes (each layer also counts one element, so
// layers without parameters are spread too).
StageSplit pipeline_split(const StrategySpec& strategy, const std::vector<nn::LayerInfo>& layers, int training_tasks);

// The most micro-batch inputs stage `stage` of `stages` holds at once under the
// schedule, with `micro_batches` per step: gpipe all, 1f1b S - s (at most all).
int64_t micro_batches_in_flight(PipelineSchedule schedule, int stage, int stages, int64_t micro_batches);

// "conv2d..flatten | dense..dense_1": the layers of each stage, for logs.
std::string describe_split(const StageSplit& split, const std::vector<nn::LayerInfo>& layers);

// Checks the rest of a pipeline job: micro_batches divides the batch per replica.
void check_micro_batches(const StrategySpec& strategy, int64_t batch_size_per_replica);

}  // namespace dtrain::strategy
