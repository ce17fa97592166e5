// Implementation of pipeline_stages.h.
#include "strategy/planning/pipeline_stages.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::strategy {

int pipeline_copies(const StrategySpec& strategy, int training_tasks) {
  if (strategy.data_parallel > 0) return static_cast<int>(strategy.data_parallel);
  if (strategy.stages_auto) return 1;
  const int64_t holders = static_cast<int64_t>(strategy.stages.size() + 1) * strategy.tensor_parallel;
  return static_cast<int>(std::max<int64_t>(1, training_tasks / holders));
}

int pipeline_stage_count(const StrategySpec& strategy, int training_tasks) {
  const int64_t copies = pipeline_copies(strategy, training_tasks), t = strategy.tensor_parallel;
  const int64_t per_stage = copies * t;  // tasks holding each stage
  const std::string tensor = t > 1 ? str(" x ", t, " tensor_parallel") : "";
  if (strategy.stages_auto) {
    if (training_tasks % per_stage != 0 || training_tasks / per_stage < 2)
      throw ConfigError(str(strategy.path, ".stages: \"auto\" makes one stage per ", t > 1 ? str(t, " tasks") : "task",
                            " of each of the ", copies, " pipeline copies (data_parallel", tensor,
                            "), but the cluster has ", training_tasks, " training task(s); run ", copies, tensor,
                            " x S tasks with S >= 2 (`dtrain launch --workers ", 2 * per_stage,
                            "`), or set data_parallel", t > 1 ? " / tensor_parallel" : ""));
    return static_cast<int>(training_tasks / per_stage);
  }
  const int64_t stages = static_cast<int64_t>(strategy.stages.size()) + 1;
  if (strategy.data_parallel == 0 && training_tasks % (stages * t) != 0)
    throw ConfigError(str(strategy.path, ": ", stages, " stages (", strategy.stages.size(),
                          " names in stages, plus the first)", tensor, " need a multiple of ", stages * t,
                          " training tasks (the copies of the pipeline, data_parallel, take the rest), but the "
                          "cluster has ", training_tasks, "; run `dtrain launch --workers ", stages * t,
                          "` (or a multiple) or change strategy.stages", t > 1 ? " / tensor_parallel" : ""));
  if (stages * per_stage != training_tasks)
    throw ConfigError(str(strategy.path, ": ", stages, " stages (", strategy.stages.size(),
                          " names in stages, plus the first) x ", copies, " data_parallel cop", copies == 1 ? "y" : "ies",
                          tensor, " need ", stages * per_stage, " training tasks (",
                          t > 1 ? str(per_stage, " per stage") : "one stage per task", "), but the cluster has ",
                          training_tasks, "; run `dtrain launch --workers ", stages * per_stage,
                          "` or change strategy.stages / data_parallel", t > 1 ? " / tensor_parallel" : ""));
  return static_cast<int>(stages);
}

StageSplit named_split(const StrategySpec& strategy, const std::vector<nn::LayerInfo>& layers) {
  StageSplit split{{0}, str(strategy.path, ".stages")};
  std::vector<std::string> names;
  for (const nn::LayerInfo& l : layers) names.push_back(l.name);
  if (strategy.stages.size() + 1 > layers.size())
    throw ConfigError(str(strategy.path, ".stages: ", strategy.stages.size() + 1, " stages but the model has only ",
                          layers.size(), " layers (", join(names, ", "), "); list fewer stage boundaries"));
  for (size_t i = 0; i < strategy.stages.size(); ++i) {
    const std::string& name = strategy.stages[i];
    const auto at = std::find(names.begin(), names.end(), name);
    const std::string where = str(strategy.path, ".stages[", i, "]: ");
    if (at == names.end())
      throw ConfigError(str(where, "'", name, "' is not a layer of the model (its layers, in order: ",
                            join(names, ", "), "); name the layer where the stage begins"));
    const size_t index = static_cast<size_t>(at - names.begin());
    if (index == 0)
      throw ConfigError(str(where, "'", name, "' is the model's first layer, where the first stage begins anyway; "
                            "list only where the stages after the first begin"));
    if (index <= split.starts.back())
      throw ConfigError(str(where, "'", name, "' (layer ", index, ") does not come after the previous boundary '",
                            names[split.starts.back()], "' (layer ", split.starts.back(),
                            "); list the boundaries in model order, each once"));
    split.starts.push_back(index);
  }
  return split;
}

StageSplit balanced_split(const std::vector<double>& cost, int stages, const std::string& how) {
  const size_t n = cost.size();
  const size_t s = static_cast<size_t>(stages);
  if (s > n) throw ConfigError(str("strategy.stages \"auto\": ", s, " stages but the model has only ", n, " layers"));
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest largest part when the first i layers make k parts;
  // from[k][i] the start of the k-th part there.
  std::vector<std::vector<double>> best(s + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<size_t>> from(s + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0.0;
  for (size_t k = 1; k <= s; ++k)
    for (size_t i = k; i <= n; ++i)
      for (size_t j = k - 1; j < i; ++j) {
        const double worst = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (worst < best[k][i]) {
          best[k][i] = worst;
          from[k][i] = j;
        }
      }
  StageSplit split{std::vector<size_t>(s, 0), how};
  size_t end = n;
  for (size_t k = s; k > 0; --k) {
    split.starts[k - 1] = from[k][end];
    end = from[k][end];
  }
  return split;
}

StageSplit pipeline_split(const StrategySpec& strategy, const std::vector<nn::LayerInfo>& layers, int training_tasks) {
  const int stages = pipeline_stage_count(strategy, training_tasks);
  if (!strategy.stages_auto) return named_split(strategy, layers);
  std::vector<double> cost;
  for (const nn::LayerInfo& l : layers) cost.push_back(static_cast<double>(l.params + 1));
  return balanced_split(cost, stages, "auto: parameter bytes");
}

int64_t micro_batches_in_flight(PipelineSchedule schedule, int stage, int stages, int64_t micro_batches) {
  if (schedule == PipelineSchedule::kGpipe) return micro_batches;
  return std::min<int64_t>(stages - stage, micro_batches);
}

std::string describe_split(const StageSplit& split, const std::vector<nn::LayerInfo>& layers) {
  std::vector<std::string> parts;
  for (size_t s = 0; s < split.stages(); ++s) {
    const size_t first = split.starts[s], last = split.end_of(s, layers.size()) - 1;
    parts.push_back(first == last ? layers[first].name : str(layers[first].name, "..", layers[last].name));
  }
  return join(parts, " | ");
}

void check_micro_batches(const StrategySpec& strategy, int64_t batch_size_per_replica) {
  if (batch_size_per_replica % strategy.micro_batches == 0) return;
  throw ConfigError(str(strategy.path, ".micro_batches: ", strategy.micro_batches,
                        " micro-batches do not divide train.batch_size_per_replica ", batch_size_per_replica,
                        "; use a batch size that is a multiple of micro_batches (e.g. ",
                        (batch_size_per_replica / strategy.micro_batches + 1) * strategy.micro_batches,
                        ") or a micro_batches that divides it"));
}

}  // namespace dtrain::strategy
