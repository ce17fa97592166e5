// Implementation of reference.h: one Markdown table per registry.
#include "job/reference.h"

#include "core/strings.h"
#include "data/dataset.h"
#include "nn/layer_registry.h"
#include "nn/losses.h"
#include "optim/clipping.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "strategy/registry.h"

namespace dtrain::job {
namespace {

// "`units`: output features (required, >= 1); `use_bias`: true", or "none".
std::string keys_cell(const std::vector<config::KeyDoc>& keys) {
  if (keys.empty()) return "none";
  std::vector<std::string> parts;
  for (const config::KeyDoc& k : keys) parts.push_back(str("`", k.name, "`: ", k.doc));
  return join(parts, "; ");
}

std::string table(const std::string& title, const std::string& column) {
  return str("\n", title, "\n\n| ", column, " | what it is | keys |\n| --- | --- | --- |\n");
}

std::string row(const std::string& name, const std::string& doc, const std::vector<config::KeyDoc>& keys) {
  return str("| `", name, "` | ", doc, " | ", keys_cell(keys), " |\n");
}

// The strategies table's last column.
const char* between_tasks(strategy::CrossTask cross_task) {
  switch (cross_task) {
    case strategy::CrossTask::kNothing: return "nothing: one task trains";
    case strategy::CrossTask::kAllReduce: return "an all-reduce over the training tasks";
    case strategy::CrossTask::kParameterServer:
      return "workers pull variables from and push gradients to the ps tasks; the coordinator hands out work units";
  }
  return "";
}

}  // namespace

std::string reference_markdown() {
  std::string out = str(kReferenceBegin, "\n");
  out += table("Layers (`model.layers`: each an object with `type`, an optional `name`, and its keys):", "type");
  for (const nn::LayerType* t : nn::layer_types()) out += row(t->name, t->doc, t->keys);
  out += table("Losses (`loss`: a name, or an object with `type` and its keys):", "loss");
  for (const nn::LossType& t : nn::loss_types()) out += row(t.name, t.doc, t.keys);
  out += table("Optimizers (`optimizer`: a name, or an object with `type`, `learning_rate`, the gradient-clipping "
               "keys below and its keys):",
               "optimizer");
  for (const optim::OptimizerType& t : optim::optimizer_types()) out += row(t.name, t.doc, t.keys);
  out += str("\nGradient clipping (keys of every optimizer; at most one of them, as in Keras; applied to the "
             "aggregated gradient before the update; under parameter_server by each worker before its push, so a sync "
             "round averages clipped gradients): ",
             keys_cell(optim::clipping_keys()), "\n");
  out += table("Learning-rate schedules (`optimizer.learning_rate`: a number, or an object with `type`, "
               "`initial_learning_rate` (required, except for piecewise_constant), `warmup_steps` (0: steps of "
               "linear warmup first; the schedule's step `s` counts from its end) and its keys):",
               "schedule");
  for (const optim::ScheduleType& t : optim::schedule_types()) out += row(t.name, t.doc, t.keys);
  out += table("Data formats (`data.train`, `data.test`, `data.validation`: an object with `format`, `take` (0 = all samples) and "
               "its keys):",
               "format");
  for (const data::DataFormat* f : data::data_formats()) out += row(f->name, f->doc, f->keys);
  out += str("\nStrategies (`strategy.type`; the section's other keys in the table after it):\n\n"
             "| strategy | what it is | between the tasks of a job |\n| --- | --- | --- |\n");
  for (const strategy::StrategyEntry& e : strategy::strategies())
    out += str("| `", e.name, "` | ", e.description, " | ", between_tasks(e.cross_task), " |\n");
  out += "\nThe strategy section's keys:\n\n| key | meaning |\n| --- | --- |\n";
  for (const config::KeyDoc& k : strategy::strategy_keys()) out += str("| `", k.name, "` | ", k.doc, " |\n");
  out += str("\n", kReferenceEnd, "\n");
  return out;
}

}  // namespace dtrain::job
