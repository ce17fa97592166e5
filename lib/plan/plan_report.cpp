// The plan for people and for tools: describe() (one line per decision) and
// to_json() (`dtrain validate --json`), and the names of the plan's choices.
#include <nlohmann/json.hpp>

#include "core/strings.h"
#include "plan/execution_plan.h"

namespace dtrain::plan {

const char* role_name(Role role) {
  switch (role) {
    case Role::kTrain: return "train";
    case Role::kServeVariables: return "serve variables (ps)";
    case Role::kEvaluate: return "evaluate";
    case Role::kWait: return "wait";
  }
  return "?";
}

const char* tasks_group_name(TasksGroup group) {
  switch (group) {
    case TasksGroup::kNone: return "none";
    case TasksGroup::kGloo: return "Gloo (TCP)";
    case TasksGroup::kGlooRing: return "Gloo ring (TCP)";
    case TasksGroup::kHierarchical: return "hierarchical: shared memory within a machine, Gloo between machines";
  }
  return "?";
}

const char* activations_name(Activations activations) {
  switch (activations) {
    case Activations::kNone: return "none";
    case Activations::kGloo: return "Gloo";
    case Activations::kNccl: return "NCCL where every stage has a GPU of its own, else Gloo";
  }
  return "?";
}

std::string describe(const ExecutionPlan& plan) {
  std::string out;
  for (const Decision& d : plan.decisions)
    out += str("  ", d.what, ": ", d.choice, d.why.empty() ? std::string() : str(" (", d.why, ")"), "\n");
  return out;
}

std::string to_json(const ExecutionPlan& plan) {
  nlohmann::ordered_json j;
  j["strategy"] = plan.strategy->name;
  j["task"] = plan.task;
  j["cluster_source"] = plan.cluster_source;
  j["role"] = role_name(plan.role);
  j["rank"] = plan.rank;
  j["training_tasks"] = plan.training_tasks;
  j["machines"] = plan.machines;
  j["tasks_on_host"] = plan.tasks_on_host;
  j["met"] = plan.met;
  std::vector<std::string> devices;
  for (const Device& d : plan.replicas) devices.push_back(d.str());
  j["devices"] = devices;
  j["threads"] = plan.threads;
  j["prefetch"] = plan.prefetch;
  j["tasks_group"] = tasks_group_name(plan.tasks);
  j["gradients"] = gradients_name(plan.gradients);
  j["activations"] = activations_name(plan.activations);
  if (plan.split) {
    j["pipeline_split"] = {{"starts", plan.split->starts}, {"how", plan.split->how}, {"measured_at_start", plan.measure_split}};
  }
  if (plan.grid) {  // every training rank's place and groups (rank r: the r-th of chief, workers)
    const strategy::ParallelGrid& g = *plan.grid;
    nlohmann::ordered_json tasks = nlohmann::ordered_json::array();
    for (int r = 0; r < g.size(); ++r) {
      const strategy::GridPlace place = g.place(r);
      tasks.push_back({{"rank", r}, {"copy", place.copy}, {"stage", place.stage}, {"part", place.part},
                       {"data_group", g.group(strategy::GridAxis::kData, r)},
                       {"pipeline_group", g.group(strategy::GridAxis::kPipeline, r)},
                       {"tensor_group", g.group(strategy::GridAxis::kTensor, r)}});
    }
    j["grid"] = {{"data", g.data()}, {"pipeline", g.pipeline()}, {"tensor", g.tensor()}, {"expert", g.expert()},
                 {"order", "tensor fastest, then pipeline, then data"}, {"tasks", tasks}};
  }
  if (plan.memory) {
    j["memory"] = {{"total_bytes", plan.memory->estimate.total},
                   {"of", plan.memory->heading.empty() ? "this task" : plan.memory->heading},
                   {"held_against_limit", plan.memory->checked}};
  }
  nlohmann::ordered_json decisions = nlohmann::ordered_json::array();
  for (const Decision& d : plan.decisions) decisions.push_back({{"what", d.what}, {"choice", d.choice}, {"why", d.why}});
  j["decisions"] = decisions;
  return j.dump();
}

}  // namespace dtrain::plan
