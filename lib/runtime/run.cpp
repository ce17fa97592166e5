// Implementation of run.h: run_job and validate_task.
#include "runtime/run.h"

#include <csignal>
#include <cstdio>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "rendezvous/store_server.h"
#include "runtime/cluster_task.h"
#include "runtime/fault_injection.h"
#include "strategy/registry.h"
#include "trainer/trainer.h"

namespace dtrain::runtime {
namespace {

// Trains as one task of a multi-task job.
void run_in_cluster(const job::JobConfig& job, const config::ClusterConfig& cluster, const Environment& env,
                    trainer::RunOptions run, int64_t kill_step) {
  ClusterTask task(session_spec(job, cluster, env));
  rendezvous::ClusterSession& session = task.session();
  run.write_metrics = session.is_chief();
  const strategy::StrategyEntry& entry = strategy::entry_of(job.strategy);
  try {
    if (session.rank() < 0) {
      log::info(task.name(), " has no work under strategy ", entry.name,
                "; waiting for the training tasks to finish");
    } else {
      std::unique_ptr<comm::Communicator> workers;
      if (entry.cross_task == strategy::CrossTask::kAllReduce) {
        workers = task.connect_training_tasks("comm/workers/", job.runtime.heartbeat_timeout + 20.0,
                                              job.strategy.communication);
        run.workers = workers.get();
      }
      run.on_step = [&](int64_t step) {
        if (step == kill_step) std::raise(SIGKILL);  // fault injection for tests and demos
        session.report_step(step);
        session.check_health();
      };
      try {
        trainer::run_training(job, run);
      } catch (const PeerLost& e) {
        task.rethrow_collective_failure(e);
      } catch (const TimeoutError& e) {
        task.rethrow_collective_failure(e);
      } catch (const CommError& e) {
        task.rethrow_collective_failure(e);
      }
    }
    session.finish();
  } catch (const PeerLost&) {
    throw;  // the chief already knows; nothing to report
  } catch (const Preempted&) {
    throw;  // every task agreed to stop after the same step: not a failure of the job
  } catch (const Error& e) {
    session.fail(str(task.name(), ": ", e.what()));
    throw;
  }
}

}  // namespace

void run_job(const job::JobConfig& job, const Environment& env, const RunRequest& request) {
  const config::ClusterConfig cluster = config::resolve_cluster(job.file_cluster(), env.tf_config_or_null(), request.task_flag);
  // In a cluster, log lines (and the error line) name the task ("[worker:1] dtrain:
  // ..."); `dtrain launch` does not add its own prefix to lines that carry it.
  if (!cluster.single_process()) log::set_prefix(str("[", cluster.task.str(), "] "));
  strategy::check_cluster_roles(job.strategy, cluster.spec, cluster.source);
  const int64_t kill_step = arm_injected_fault(parse_injected_fault(env.inject));
  trainer::RunOptions run;
  run.host = env.host;
  run.summary_path = request.summary_path;
  run.stop_requested = request.stop_requested;
  if (!cluster.single_process()) return run_in_cluster(job, cluster, env, run, kill_step);
  if (kill_step > 0)
    run.on_step = [kill_step](int64_t step) {
      if (step == kill_step) std::raise(SIGKILL);
    };
  trainer::run_training(job, run);
}

void validate_task(const job::JobConfig& job, const Environment& env, const std::string& task_flag) {
  const config::ClusterConfig cluster = config::resolve_cluster(job.file_cluster(), env.tf_config_or_null(), task_flag);
  strategy::check_cluster_roles(job.strategy, cluster.spec, cluster.source);
  if (!cluster.single_process()) {
    const std::string address = cluster.spec.address(cluster.task);
    rendezvous::check_can_listen(address, str(cluster.task.str(), " (", cluster.source, ")"));
    std::printf("ok   cluster from %s: %d tasks, world size %d; this task %s at %s, listening there works\n",
                cluster.source.c_str(), static_cast<int>(cluster.spec.all_tasks().size()),
                cluster.spec.world_size(), cluster.task.str().c_str(), address.c_str());
  }
  trainer::validate_job(job, env.host);
}

}  // namespace dtrain::runtime
