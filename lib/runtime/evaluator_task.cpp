// The evaluator task (TF's side-car evaluation): evaluates the chief's
// checkpoints until the final one, watching the job's health between looks.
#include <string>

#include "core/error.h"
#include "runtime/task_roles.h"

namespace dtrain::runtime {

const char* const kFinalStepKey = "train/final_step";

void run_evaluator_task(const job::JobConfig& job, const plan::ExecutionPlan& plan, const trainer::RunOptions& run,
                        ClusterTask& task) {
  rendezvous::ClusterSession& session = task.session();
  trainer::EvaluatorOptions options;
  options.summary_path = run.summary_path;
  options.training_done = [&]() -> std::optional<int64_t> {
    if (const int signal = run.stop_signal ? run.stop_signal() : 0)
      throw Preempted(stop_reason(signal) + " (an evaluator has nothing to save; the training goes on)",
                      stop_exit_code(signal));
    session.check_health();
    const std::optional<std::string> step = session.store().get(kFinalStepKey);
    if (!step) return std::nullopt;
    return std::stoll(*step);
  };
  run_session(task, [&] { trainer::run_evaluator(job, plan, options); });
}

}  // namespace dtrain::runtime
