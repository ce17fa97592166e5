// The task runtime's roles, one file each (private to lib/runtime): a ps task
// (ps_task.cpp), the evaluator (evaluator_task.cpp), a task of a cluster that
// trains (cluster_run.cpp: the plan made again once the tasks met, the
// communicators it names connected, the session's failure handling); run.cpp's
// run_job picks one.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "job/job_config.h"
#include "plan/execution_plan.h"
#include "ps/placement.h"
#include "rendezvous/cluster_session.h"
#include "runtime/cluster_task.h"
#include "runtime/environment.h"
#include "trainer/trainer.h"

namespace dtrain::runtime {

// cluster_run.cpp: runs `body` as the task's part of the job: a collective's
// failure is turned into the lost task's name (the flight record logged), any
// other error is told to the chief; the session's final barrier after it.
void run_session(ClusterTask& task, const std::function<void()>& body);
// With output.trace, this task's trace goes on the chief's clock (trace.h).
void align_trace_clock(const job::JobConfig& job, ClusterTask& task);
// One task of a multi-task job: `first` is its plan made before the tasks met,
// made again once they did (which machine each task is on).
void run_in_cluster(const job::JobConfig& job, const config::ClusterConfig& cluster, plan::Machine machine,
                    const plan::ExecutionPlan& first, const Environment& env, trainer::RunOptions run,
                    int64_t kill_step);

// ps_task.cpp: the tasks whose loss the job survives (an evaluator always;
// `workers`: every training worker but the chief, as under parameter_server
// (TF's promise) and strategy.elastic).
std::set<std::string> expendable_tasks(const config::ClusterSpec& cluster, bool workers);
// A parameter_server job's placement of the model's variables over its ps tasks.
ps::Placement job_placement(const job::JobConfig& job, const config::ClusterSpec& cluster);
// The training workers of a parameter_server job: every worker but the coordinator.
std::vector<std::string> training_workers(const config::ClusterSpec& cluster);
// A ps task of a parameter_server job: serves its shards until the job ends,
// then writes its summary to run.summary_path (when not ""). Once it has joined
// it looks at run.stop_signal once: from then on a SIGTERM does not end it
// (the workers finish their step and save through it, then the job ends).
void run_ps_task(const job::JobConfig& job, const config::ClusterConfig& cluster, const Environment& env,
                 rendezvous::SessionSpec spec, int64_t kill_step, const trainer::RunOptions& run);

// evaluator_task.cpp: the store key the chief sets to the final step once
// training ended and its final checkpoint is saved.
extern const char* const kFinalStepKey;
// An evaluator task: evaluates the chief's checkpoints until the final one.
void run_evaluator_task(const job::JobConfig& job, const plan::ExecutionPlan& plan, const trainer::RunOptions& run,
                        ClusterTask& task);

}  // namespace dtrain::runtime
