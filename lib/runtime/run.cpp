// Implementation of run.h: run_job (a task picks its role: task_roles.h) and validate_task.

#include "runtime/run.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/trace.h"
#include "rendezvous/store_server.h"
#include "runtime/fault_injection.h"
#include "runtime/task_roles.h"
#include "trainer/reporting/progress.h"

namespace dtrain::runtime {
namespace {

// Where a task's trace goes: <output.dir>/trace/<type>-<index>.json, joined by
// `dtrain launch` into <output.dir>/trace.json; one task alone writes that directly.
std::string trace_path(const job::JobConfig& job, const config::ClusterConfig& cluster) {
  const std::filesystem::path dir(job.output.dir);
  if (cluster.single_process()) return (dir / "trace.json").string();
  return (dir / "trace" / str(cluster.task.type, "-", cluster.task.index, ".json")).string();
}

void write_trace(const job::JobConfig& job, const config::ClusterConfig& cluster) {
  if (!job.output.trace) return;
  if (cluster.single_process()) return trace::write(trace_path(job, cluster), "dtrain", 0);
  const std::vector<config::TaskId> tasks = cluster.spec.all_tasks();
  const int pid = static_cast<int>(std::find(tasks.begin(), tasks.end(), cluster.task) - tasks.begin());
  trace::write(trace_path(job, cluster), cluster.task.str(), pid);
}

// Runs `body`, then writes the trace; a failed body writes it too (best effort: the
// failure is what the caller needs to hear about).
void with_trace(const job::JobConfig& job, const config::ClusterConfig& cluster, const std::function<void()>& body) {
  try {
    body();
  } catch (...) {
    try {
      write_trace(job, cluster);
    } catch (const Error& e) {
      log::warn("the trace could not be written: ", e.what());
    }
    throw;
  }
  write_trace(job, cluster);
}

// The plan's inputs from this machine; a resolver that knows the task's index on
// its machine (SLURM_LOCALID) gives it when LOCAL_RANK is unset.
plan::Machine machine_of(const job::JobConfig& job, const Environment& env, const config::ClusterConfig& cluster) {
  plan::HostSettings host = env.host;
  if (host.local_rank < 0 && cluster.local_rank) host.local_rank = *cluster.local_rank;
  return plan::read_machine(host, job.device != "cpu");
}

}  // namespace

void run_job(const job::JobConfig& job, const Environment& env, const RunRequest& request) {
  const config::ClusterConfig cluster = env.resolve_cluster(job.file_cluster(), job.runtime, request.task_flag);
  // In a cluster, log lines (and the error line) name the task ("[worker:1] dtrain:
  // ..."); `dtrain launch` does not add its own prefix to lines that carry it.
  if (!cluster.single_process()) log::set_prefix(str("[", cluster.task.str(), "] "));
  if (env.progress_columns > 0) trainer::relay_progress(env.progress_columns);
  const plan::Machine machine = machine_of(job, env, cluster);
  const plan::ExecutionPlan plan = plan::make_execution_plan(job, cluster, machine);
  if (cluster.spec.count(config::TaskType::kEvaluator) > 0) trainer::check_evaluator_job(job);
  // The task that writes the job's results refuses to overwrite an earlier run's.
  if (cluster.single_process() || cluster.task == cluster.spec.chief()) {
    trainer::check_fresh_output(job);
    trainer::clear_earlier_results(job);
  }
  const int64_t kill_step = arm_injected_fault(parse_injected_fault(env.inject));
  trainer::RunOptions run;
  run.summary_path = request.summary_path;
  run.stop_signal = request.stop_signal;
  trace::set_thread_name("main");  // names it in hang reports too (trace::activities)
  if (job.output.trace) {
    prepare_output_file(trace_path(job, cluster), "output.trace");  // a path in the way: said now, not after training
    trace::enable();
  }
  if (!cluster.single_process())
    return with_trace(job, cluster, [&] { run_in_cluster(job, cluster, machine, plan, env, run, kill_step); });
  if (kill_step > 0)
    run.on_step = [kill_step](int64_t step) {
      if (step == kill_step) std::raise(SIGKILL);
    };
  with_trace(job, cluster, [&] { trainer::run_training(job, plan, run); });
}

void validate_task(const job::JobConfig& job, const Environment& env, const std::string& task_flag, bool json) {
  const config::ClusterConfig cluster = env.resolve_cluster(job.file_cluster(), job.runtime, task_flag);
  const plan::ExecutionPlan plan = plan::make_execution_plan(job, cluster, machine_of(job, env, cluster));
  if (cluster.spec.count(config::TaskType::kEvaluator) > 0) trainer::check_evaluator_job(job);
  if (!cluster.single_process() && cluster.spec.address(cluster.task).empty()) {
    std::printf("ok   cluster from %s: %d tasks, world size %d; this task %s registers its address with the chief "
                "(%s) at start\n",
                cluster.source.c_str(), static_cast<int>(cluster.spec.all_tasks().size()), cluster.spec.world_size(),
                cluster.task.str().c_str(), cluster.spec.address(cluster.spec.chief()).c_str());
  } else if (!cluster.single_process()) {
    const std::string address = cluster.spec.address(cluster.task);
    rendezvous::check_can_listen(address, str(cluster.task.str(), " (", cluster.source, ")"));
    std::printf("ok   cluster from %s: %d tasks, world size %d; this task %s at %s, listening there works\n",
                cluster.source.c_str(), static_cast<int>(cluster.spec.all_tasks().size()),
                cluster.spec.world_size(), cluster.task.str().c_str(), address.c_str());
  }
  trainer::validate_job(job, plan);
  if (json) {
    std::printf("%s\n", plan::to_json(plan).c_str());
    return;
  }
  std::printf("plan for %s:\n%s", plan.task.empty() ? "this process" : plan.task.c_str(), plan::describe(plan).c_str());
  if (plan.grid) {  // every task's place and groups, by training rank
    std::printf("parallel grid, every training task (%s):\n", plan.grid->describe().c_str());
    for (const config::TaskId& t : cluster.spec.all_tasks())
      if (const int r = cluster.spec.rank(t); r >= 0 && r < plan.grid->size())
        std::printf("  %-10s %s\n", t.str().c_str(), plan.grid->describe_task(r).c_str());
  }
}

}  // namespace dtrain::runtime
