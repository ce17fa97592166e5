// Implementation of run.h: run_job and validate_task.

#include "runtime/run.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <set>

#include "comm/flight_recorder.h"
#include "comm/nccl_support.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/trace.h"
#include "kernels/device.h"
#include "ps/ps_server.h"
#include "ps/shard_store.h"
#include "rendezvous/store_server.h"
#include "runtime/cluster_task.h"
#include "runtime/env_registration.h"
#include "runtime/fault_injection.h"
#include "strategy/registry.h"
#include "trainer/trainer.h"

namespace dtrain::runtime {
namespace {

// The tasks whose loss the job survives: an evaluator always; under
// parameter_server every training worker but the coordinator (TF's promise).
std::set<std::string> expendable_tasks(const config::ClusterSpec& cluster, bool parameter_server) {
  std::set<std::string> out;
  for (const config::TaskId& t : cluster.all_tasks())
    if (t.type == "evaluator" || (parameter_server && t.type == "worker" && !(t == cluster.chief())))
      out.insert(t.str());
  return out;
}

// A parameter_server job's placement of the model's variables over its ps tasks.
ps::Placement job_placement(const job::JobConfig& job, const config::ClusterSpec& cluster) {
  return ps::plan_placement(ps::model_variables(job.model, job.train.seed), cluster.count("ps"),
                            job.strategy.partitioner);
}

// The training workers of a parameter_server job: every worker but the coordinator.
std::vector<std::string> training_workers(const config::ClusterSpec& cluster) {
  std::vector<std::string> out;
  for (const config::TaskId& t : cluster.all_tasks())
    if (t.type == "worker" && !(t == cluster.chief())) out.push_back(t.str());
  return out;
}

// Writes the collectives this task started last to its log (the flight recorder).
// With output.trace, this task's trace goes on the chief's clock (trace.h).
void align_trace_clock(const job::JobConfig& job, ClusterTask& task) {
  if (!job.output.trace) return;
  const int64_t offset = task.session().measure_clock_offset_us();
  trace::set_clock_offset_us(offset);
  if (!task.session().is_chief()) log::info("trace: the chief's clock is ", offset, " us ahead of this task's");
}

void log_flight_record(const ClusterTask& task) {
  const std::string record = comm::flight_record();
  if (!record.empty()) log::warn(task.name(), ": the last collectives it started (oldest first):\n", record);
}

void run_session(ClusterTask& task, const std::function<void()>& body) {
  rendezvous::ClusterSession& session = task.session();
  try {
    try {
      body();
    } catch (const PeerLost& e) {
      log_flight_record(task);
      task.rethrow_collective_failure(e);
    } catch (const TimeoutError& e) {
      log_flight_record(task);
      task.rethrow_collective_failure(e);
    } catch (const CommError& e) {
      log_flight_record(task);
      task.rethrow_collective_failure(e);
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

// A ps task of a parameter_server job: serves its shards until the job ends.
void run_ps_task(const job::JobConfig& job, const config::ClusterConfig& cluster, const Environment& env,
                 rendezvous::SessionSpec spec, int64_t kill_step) {
  const ps::Placement placement = job_placement(job, cluster.spec);
  ps::ShardStore shards(placement, cluster.task.index, job.model, job.train.seed, job.optimizer);
  ps::PsServerOptions options;
  options.credentials = spec.credentials;
  options.task = cluster.task.str();
  options.mode = job.strategy.mode;
  options.max_staleness = job.strategy.max_staleness;
  options.workers = training_workers(cluster.spec);
  options.checkpoint_dir = trainer::checkpoint_dir(job);  // it writes its shards into the chief's checkpoints
  if (kill_step > 0)  // fault injection: this ps's applied updates count
    options.on_update = [kill_step](int64_t version) {
      if (version == kill_step) std::raise(SIGKILL);
    };
  const config::HostPort address = config::parse_host_port(cluster.spec.address(cluster.task), "this ps's address");
  // Served before joining, so the workers find it as soon as they look.
  ps::PsServer server(shards, options, env.listen_socket(), "0.0.0.0", address.port);
  ClusterTask task(spec);
  align_trace_clock(job, task);
  log::info(task.name(), " serves ", shards.elements(), " floats of variables (",
            job.strategy.mode == ps::UpdateMode::kSync    ? "sync"
            : job.strategy.mode == ps::UpdateMode::kStale ? "stale"
                                                          : "async",
            " updates) until the job ends");
  run_session(task, [&] {});
  log::info(task.name(), " applied ", server.version(), " updates");
}

// The store key the chief sets to the final step once training ended and its
// final checkpoint is saved.
constexpr const char* kFinalStepKey = "train/final_step";

// An evaluator task: evaluates the chief's checkpoints until the final one.
void run_evaluator_task(const job::JobConfig& job, const trainer::RunOptions& run, ClusterTask& task) {
  rendezvous::ClusterSession& session = task.session();
  trainer::EvaluatorOptions options;
  options.host = run.host;
  options.summary_path = run.summary_path;
  options.training_done = [&]() -> std::optional<int64_t> {
    if (run.stop_requested && run.stop_requested())
      throw Preempted("stopped by SIGTERM (an evaluator has nothing to save; the training goes on)");
    session.check_health();
    const std::optional<std::string> step = session.store().get(kFinalStepKey);
    if (!step) return std::nullopt;
    return std::stoll(*step);
  };
  run_session(task, [&] { trainer::run_evaluator(job, options); });
}

// Trains as one task of a multi-task job.
// Where a task's trace goes: <output.dir>/trace/<type>-<index>.json, joined by
// `dtrain launch` into <output.dir>/trace.json; one task alone writes that directly.
void write_trace(const job::JobConfig& job, const config::ClusterConfig& cluster) {
  if (!job.output.trace) return;
  const std::filesystem::path dir(job.output.dir);
  if (cluster.single_process()) return trace::write((dir / "trace.json").string(), "dtrain", 0);
  const std::vector<config::TaskId> tasks = cluster.spec.all_tasks();
  const int pid = static_cast<int>(std::find(tasks.begin(), tasks.end(), cluster.task) - tasks.begin());
  trace::write((dir / "trace" / str(cluster.task.type, "-", cluster.task.index, ".json")).string(), cluster.task.str(),
               pid);
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

void run_in_cluster(const job::JobConfig& job, const config::ClusterConfig& cluster, const Environment& env,
                    trainer::RunOptions run, int64_t kill_step) {
  const strategy::StrategyEntry& entry = strategy::entry_of(job.strategy);
  const bool parameter_server = entry.cross_task == strategy::CrossTask::kParameterServer;
  rendezvous::SessionSpec spec = session_spec(job, cluster, env);
  if (cluster.registers_addresses) {  // env://: learn the other tasks' addresses first
    Registration registration = register_addresses(cluster, spec.credentials, job.runtime);
    spec.cluster = registration.cluster;
    spec.server = registration.server;
  }
  spec.expendable = expendable_tasks(cluster.spec, parameter_server);
  if (parameter_server && cluster.task.type == "ps") return run_ps_task(job, cluster, env, spec, kill_step);
  ClusterTask task(spec);
  align_trace_clock(job, task);
  rendezvous::ClusterSession& session = task.session();
  run.write_metrics = session.is_chief();
  run.on_step = [&](int64_t step) {
    if (step == kill_step) std::raise(SIGKILL);  // fault injection for tests and demos
    session.report_step(step);
    session.check_health();
  };
  run.host.tasks_on_host = session.tasks_on_this_host();
  if (cluster.task.type == "evaluator") return run_evaluator_task(job, run, task);
  run.final_checkpoint = cluster.spec.count("evaluator") > 0;
  run_session(task, [&] {
    if (!parameter_server && session.rank() < 0) {
      log::info(task.name(), " has no work under strategy ", entry.name,
                "; waiting for the training tasks to finish");
      return;
    }
    std::unique_ptr<comm::Communicator> workers;
    std::unique_ptr<ps::PsGroup> group;
    if (entry.cross_task == strategy::CrossTask::kAllReduce) {
      workers = task.connect_training_tasks(
          "comm/workers/", job.runtime.heartbeat_timeout + 20.0,
          entry.point_to_point ? strategy::Communication::kRing : job.strategy.communication);
      run.workers = workers.get();
      // A GPU job reduces its gradients with NCCL where this build has it (nccl,
      // or auto); the trainer connects it once it knows the device.
      const strategy::Communication communication = job.strategy.communication;
      if (comm::kNcclBuilt && !entry.point_to_point &&
          (communication == strategy::Communication::kNccl || communication == strategy::Communication::kAuto))
        run.connect_gradients = [&task, &job](const Device& device) {
          return task.connect_nccl("comm/nccl/workers/", job.runtime.heartbeat_timeout + 20.0, device);
        };
      // A pipeline on GPUs sends its activations with NCCL likewise (where each
      // stage has a GPU of its own: the strategy checks).
      if (comm::kNcclBuilt && entry.point_to_point &&
          (communication == strategy::Communication::kNccl || communication == strategy::Communication::kAuto))
        run.connect_device_pair = [&task, &job](const Device& device, const std::string& name, int rank) {
          return task.connect_nccl_pair(name, job.runtime.heartbeat_timeout + 20.0, device, rank);
        };
    }
    if (parameter_server) {
      std::vector<std::string> addresses;
      for (int i = 0; i < cluster.spec.count("ps"); ++i) addresses.push_back(cluster.spec.address({"ps", i}));
      ps::PsClientOptions options;
      options.credentials = spec.credentials;
      options.task = task.name();
      options.connect_timeout = job.runtime.rendezvous_timeout;
      options.request_timeout = std::max(60.0, 3.0 * job.runtime.heartbeat_timeout);
      group = std::make_unique<ps::PsGroup>(job_placement(job, cluster.spec), addresses, options);
      const std::vector<std::string> trainers = training_workers(cluster.spec);
      run.ps.group = group.get();
      run.ps.store = &session.store();
      run.ps.coordinator = session.is_chief();
      run.ps.owner = str(task.name(), "#", session.incarnation());
      run.ps.num_workers = static_cast<int>(trainers.size());
      run.ps.worker_index =
          static_cast<int>(std::find(trainers.begin(), trainers.end(), task.name()) - trainers.begin());
    }
    const trainer::RunSummary summary = trainer::run_training(job, run);
    // The final checkpoint is saved: an evaluator may stop after it.
    if (session.is_chief()) session.store().set(kFinalStepKey, std::to_string(summary.steps));
  });
}

// strategy.communication nccl with "device": "auto" where auto means the CPU (the
// job file's check let "auto" through: it may be a GPU).
void check_nccl_device(const job::JobConfig& job) {
  if (job.device != "auto" || job.strategy.communication != strategy::Communication::kNccl) return;
  const kernels::GpuReport report = kernels::list_gpus();
  strategy::check_communication_device(job.strategy, !report.gpus.empty(),
                                       str("auto, which is the CPU here (no usable GPU: ", report.why_none, ")"),
                                       job.source);
}

}  // namespace

void run_job(const job::JobConfig& job, const Environment& env, const RunRequest& request) {
  const config::ClusterConfig cluster = env.resolve_cluster(job.file_cluster(), job.runtime, request.task_flag);
  // In a cluster, log lines (and the error line) name the task ("[worker:1] dtrain:
  // ..."); `dtrain launch` does not add its own prefix to lines that carry it.
  if (!cluster.single_process()) log::set_prefix(str("[", cluster.task.str(), "] "));
  strategy::check_cluster_roles(job.strategy, cluster.spec, cluster.source);
  check_nccl_device(job);
  if (cluster.spec.count("evaluator") > 0) trainer::check_evaluator_job(job);
  const int64_t kill_step = arm_injected_fault(parse_injected_fault(env.inject));
  trainer::RunOptions run;
  run.host = env.host;
  // A resolver that knows the task's index on its machine (SLURM_LOCALID) picks its GPU when LOCAL_RANK is unset.
  if (run.host.local_rank < 0 && cluster.local_rank) run.host.local_rank = *cluster.local_rank;
  run.summary_path = request.summary_path;
  run.stop_requested = request.stop_requested;
  if (job.output.trace) {
    trace::enable();
    trace::set_thread_name("main");
  }
  if (!cluster.single_process())
    return with_trace(job, cluster, [&] { run_in_cluster(job, cluster, env, run, kill_step); });
  if (kill_step > 0)
    run.on_step = [kill_step](int64_t step) {
      if (step == kill_step) std::raise(SIGKILL);
    };
  with_trace(job, cluster, [&] { trainer::run_training(job, run); });
}

void validate_task(const job::JobConfig& job, const Environment& env, const std::string& task_flag) {
  const config::ClusterConfig cluster = env.resolve_cluster(job.file_cluster(), job.runtime, task_flag);
  strategy::check_cluster_roles(job.strategy, cluster.spec, cluster.source);
  check_nccl_device(job);
  if (cluster.spec.count("evaluator") > 0) trainer::check_evaluator_job(job);
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
  trainer::validate_job(job, env.host);
}

}  // namespace dtrain::runtime
