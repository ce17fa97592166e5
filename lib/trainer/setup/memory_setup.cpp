// A task's memory, from its execution plan: a pipeline's "auto" split measured
// when the tasks meet, then the estimate printed and held against
// runtime.memory_limit before any model of the task is allocated.
#include <cstdio>

#include "core/error.h"
#include "core/strings.h"
#include "plan/plan_memory.h"
#include "strategy/planning/pipeline_profile.h"
#include "trainer/setup/job_setup.h"

namespace dtrain::trainer {

plan::ExecutionPlan settle_stage_split(const job::JobConfig& job, const plan::ExecutionPlan& plan,
                                       comm::Communicator* workers) {
  if (!plan.measure_split || !workers || !plan.split) return plan;
  // Measured only where one task may hold the whole model (the profiler builds it
  // unsplit, whatever tensor_parallel says).
  strategy::MemoryQuery whole = plan::memory_query(job, workers->size());
  whole.tensor_parallel = 1;
  const bool fits =
      job.runtime.memory_limit == 0 || strategy::estimate_memory(whole).total <= job.runtime.memory_limit;
  return plan::with_stage_split(plan, job, strategy::measured_split(job.strategy_job(), *workers, fits, *plan.split));
}

strategy::MemoryEstimate check_memory(const job::JobConfig& job, const plan::TaskMemory& memory, bool print) {
  if (print && !memory.heading.empty()) std::printf("%s\n", memory.heading.c_str());
  if (!memory.checked) {
    // No cluster to cut the model over yet (validate without one): the whole model, not checked.
    std::printf("%s  (the whole model; each pipeline stage holds its own layers and is checked on its own)\n",
                strategy::describe(memory.estimate).c_str());
    return memory.estimate;
  }
  if (print) std::printf("%s", strategy::describe(memory.estimate).c_str());
  std::fflush(stdout);
  const std::string problem = strategy::memory_limit_problem(memory.estimate);
  if (!problem.empty()) {
    const std::string ways = plan::ways_that_fit(job, memory.training_tasks);
    throw ConfigError(str(job.source, ": ", job.runtime.path, ".memory_limit: ", problem,
                          ways.empty() ? std::string() : str("; ", ways)));
  }
  return memory.estimate;
}

}  // namespace dtrain::trainer
