// A task of a cluster that trains: it joins, makes its plan again once the tasks
// met, connects the communicators the plan names and trains; a collective's
// failure names the lost task.
#include <algorithm>
#include <csignal>

#include "comm/flight_recorder.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/trace.h"
#include "kernels/device.h"
#include "runtime/elastic.h"
#include "runtime/env_registration.h"
#include "runtime/fault_injection.h"
#include "runtime/task_roles.h"
#include "strategy/parallel/grid_groups.h"
#include "strategy/parallel/pipeline_links.h"
#include "strategy/registry.h"
#include "trainer/elastic_state.h"

namespace dtrain::runtime {
namespace {

// Writes the collectives this task started last to its log (the flight recorder).

// The communicators the plan names for a training task, connected; what the
// trainer gets of them goes into `run`. Owned here, they outlive the strategy.
struct TaskConnections {
  std::unique_ptr<comm::Communicator> workers, gradients;
  std::optional<strategy::GridGroups> grid;
  std::unique_ptr<strategy::StageLinks> stage_links;
  std::unique_ptr<ps::PsGroup> ps;
};

// `prefix`: where the groups' keys go in the job's store ("comm/"; an elastic
// job's later memberships "comm/g<generation>/").
void connect_planned(const job::JobConfig& job, const plan::ExecutionPlan& plan, const plan::Machine& machine,
                     const config::ClusterConfig& cluster, const rendezvous::SessionSpec& spec, ClusterTask& task,
                     TaskConnections& c, trainer::RunOptions& run, const std::string& prefix = "comm/") {
  rendezvous::ClusterSession& session = task.session();
  const double timeout = job.runtime.heartbeat_timeout + 20.0;
  if (plan.needs_tasks_group()) {
    c.workers = task.connect_training_tasks(prefix + "workers/", timeout, plan.tasks);
    run.workers = c.workers.get();
  }
  if (plan.grid && c.workers) {
    c.grid = task.connect_grid_groups(*plan.grid, *c.workers, prefix + "grid/", timeout);
    run.grid = &*c.grid;
  }
  if (plan.gradients == plan::Gradients::kNccl) {
    // NCCL's group lives on the plan's GPU: made ready first.
    const Device device = kernels::select_device(plan.device().str());
    c.gradients = task.connect_nccl(prefix + "nccl/workers/", timeout, device);
    run.gradients = c.gradients.get();
  }
  if (plan.activations == plan::Activations::kNccl && plan.split) {
    // NCCL between neighbouring stages where every stage of the copy has a GPU of
    // its own (the tasks compare their GPUs first), else the strategy's Gloo links.
    const Device device = kernels::select_device(plan.device().str());
    c.stage_links = strategy::connect_nccl_links_if_distinct(
        *c.workers, static_cast<int>(plan.split->stages()), device, machine.host.nccl_hostid,
        [&task, timeout, device](const std::string& name, int rank) {
          return task.connect_nccl_pair(name, timeout, device, rank);
        });
    run.stage_links = c.stage_links.get();
  }
  if (plan.gradients == plan::Gradients::kParameterServers) {
    std::vector<std::string> addresses;
    for (int i = 0; i < cluster.spec.count(config::TaskType::kPs); ++i) addresses.push_back(cluster.spec.address({"ps", i}));
    ps::PsClientOptions options;
    options.credentials = spec.credentials;
    options.task = task.name();
    options.connect_timeout = job.runtime.rendezvous_timeout;
    options.request_timeout = std::max(60.0, 3.0 * job.runtime.heartbeat_timeout);
    c.ps = std::make_unique<ps::PsGroup>(job_placement(job, cluster.spec), addresses, options);
    const std::vector<std::string> trainers = training_workers(cluster.spec);
    run.ps.group = c.ps.get();
    run.ps.store = &session.store();
    run.ps.coordinator = session.is_chief();
    run.ps.owner = str(task.name(), "#", session.incarnation());
    run.ps.num_workers = static_cast<int>(trainers.size());
    run.ps.worker_index =
        static_cast<int>(std::find(trainers.begin(), trainers.end(), task.name()) - trainers.begin());
    run.ps.workers = trainers;
  }
}

// A failure that a lost member causes in a collective (or a newer membership
// seen after a step): an elastic job re-forms on it. (A data file's IoError or
// a ConfigError is the job's own.)
bool member_loss_may_explain(const Error& e) {
  return dynamic_cast<const PeerLost*>(&e) || dynamic_cast<const TimeoutError*>(&e) ||
         dynamic_cast<const CommError*>(&e);
}

// A task that came to an elastic job whose training had ended (the chief set
// train/final_step): it ends too, with exit 0 (the job succeeded).
void log_nothing_to_join(ClusterTask& task, const std::string& final_step) {
  log::warn("elastic: ", task.name(), " came after the job's last step (", final_step,
            "): its training has ended, there is nothing left to join");
}

// strategy.elastic: trains one membership after another. Each is planned again
// for its members (the plan's rank and training tasks count only them),
// connected under its own keys, and trained by run_training from the state
// the members agreed on (elastic.h); the first is the whole cluster.
void train_elastic(const job::JobConfig& job, plan::Machine machine, const rendezvous::SessionSpec& spec,
                   ClusterTask& task, trainer::RunOptions run) {
  rendezvous::ClusterSession& session = task.session();
  trainer::ElasticState elastic;
  run.elastic = &elastic;
  Membership membership = first_membership(task);
  // Between steps (after a due checkpoint): a newer membership (a task came
  // back) ends this one; the heartbeats bring the generation.
  elastic.membership_changed = [&] { return session.membership_generation() > membership.generation; };
  const double agree_seconds = job.runtime.heartbeat_timeout + 4.0 * job.runtime.heartbeat_interval + 5.0;
  if (joins_running_job(task)) {
    if (const std::optional<std::string> final_step = session.store().get(kFinalStepKey))
      return log_nothing_to_join(task, *final_step);
    log::info("elastic: ", task.name(), " joins the running job; it takes the members' state at their next step's end");
    session.store().set(rendezvous::kRejoinKeyPrefix + task.name(), std::to_string(session.incarnation()));
    // (the members post at their next step's end, which a long step or an epoch's
    // evaluation may put off past agree_seconds: a joiner waits as long as for the
    // rendezvous; a member's loss or the job's end ends the wait sooner)
    membership = agree_on_membership(task, elastic, running_membership(task), PeerLost("joining"),
                                     job.strategy.elastic.min_workers,
                                     std::max(agree_seconds, job.runtime.rendezvous_timeout));
    if (membership.ended_at_step >= 0) return log_nothing_to_join(task, std::to_string(membership.ended_at_step));
  }
  for (;;) {
    task.set_members(membership.ranks, membership.generation);
    machine.members = membership.ranks;
    machine.host_of_rank = task.host_of_rank();  // (a task that joined since: its machine is known now)
    const plan::ExecutionPlan plan = plan::make_execution_plan(job, session.cluster(), machine);
    // batch "global": the micro-batches and their samples for this many tasks
    elastic.split = strategy::elastic_split(job.train.gradient_accumulation_steps, job.train.batch_size_per_replica,
                                            session.world_size(), static_cast<int>(membership.ranks.size()));
    job::JobConfig generation_job = job;
    generation_job.train.gradient_accumulation_steps = elastic.split.accumulation;
    generation_job.train.batch_size_per_replica = elastic.split.micro_batch.at(static_cast<size_t>(plan.rank));
    if (!elastic.changes.empty()) {
      elastic.changes.back().accumulation_steps = elastic.split.accumulation;
      elastic.changes.back().micro_batches = elastic.split.micro_batch;
    }
    try {
      TaskConnections connections;
      connect_planned(generation_job, plan, machine, session.cluster(), spec, task, connections, run,
                      membership.generation == 0 ? "comm/" : str("comm/g", membership.generation, "/"));
      const trainer::RunSummary summary = trainer::run_training(generation_job, plan, run);
      if (session.is_chief()) session.store().set(kFinalStepKey, std::to_string(summary.steps));
      return;
    } catch (const Error& cause) {
      // (the connections are closed by now: members still inside a collective
      // with this task see it fail and come here too)
      if (!elastic.below_minimum.empty() || !member_loss_may_explain(cause)) throw;
      membership = agree_on_membership(task, elastic, membership, cause, job.strategy.elastic.min_workers, agree_seconds);
      if (membership.ended_at_step >= 0) {  // (its last collective failed here, not on the chief)
        log::warn("elastic: the chief finished the job's training at step ", membership.ended_at_step, ", which ",
                  task.name(), " had done too, while it re-formed its group; it ends with the job");
        return;
      }
    }
  }
}

}  // namespace

void align_trace_clock(const job::JobConfig& job, ClusterTask& task) {
  if (!job.output.trace) return;
  const trace::ClockOffset offset = task.session().measure_clock_offset();
  trace::set_clock_offset(offset);
  if (!task.session().is_chief())
    log::info("trace: the chief's clock is ", offset.offset_us, " us ahead of this task's (within ",
              offset.uncertainty_us, " us)");
}

void run_session(ClusterTask& task, const std::function<void()>& body) {
  rendezvous::ClusterSession& session = task.session();
  try {
    try {
      body();
    } catch (const PeerLost& e) {
      comm::log_flight_record(task.name());
      task.rethrow_collective_failure(e);
    } catch (const TimeoutError& e) {
      comm::log_flight_record(task.name());
      task.rethrow_collective_failure(e);
    } catch (const CommError& e) {
      comm::log_flight_record(task.name());
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

void run_in_cluster(const job::JobConfig& job, const config::ClusterConfig& cluster, plan::Machine machine,
                    const plan::ExecutionPlan& first, const Environment& env, trainer::RunOptions run,
                    int64_t kill_step) {
  rendezvous::SessionSpec spec = session_spec(job, cluster, env);
  if (cluster.registers_addresses) {  // env://: learn the other tasks' addresses first
    Registration registration = register_addresses(cluster, spec.credentials, job.runtime);
    spec.cluster = registration.cluster;
    spec.server = registration.server;
  }
  spec.expendable = expendable_tasks(cluster.spec, job.survives_lost_workers());
  if (first.role == plan::Role::kServeVariables)
    return run_ps_task(job, cluster, env, spec, kill_step, run);
  ClusterTask task(spec);
  align_trace_clock(job, task);
  rendezvous::ClusterSession& session = task.session();
  machine.host.tasks_on_host = session.tasks_on_this_host();
  machine.host_of_rank = task.host_of_rank();
  const plan::ExecutionPlan plan = plan::make_execution_plan(job, session.cluster(), machine);
  if (const std::vector<std::string> changed = plan::changed_parts(first, plan); !changed.empty())
    log::debug("plan: made again once the tasks met; changed: ", join(changed, ", "));
  run.write_metrics = session.is_chief();
  run.on_step = [&](int64_t step) {
    if (step == kill_step) std::raise(SIGKILL);  // fault injection for tests and demos
    session.report_step(step);
    session.check_health();
  };
  const InjectedFault fault = parse_injected_fault(env.inject);
  if (fault.stall_reader_step > 0 || fault.skip_allreduce_step > 0)
    run.before_batch = [fault](int64_t step) { before_batch_if_injected(fault, step); };
  if (plan.role == plan::Role::kEvaluate) return run_evaluator_task(job, plan, run, task);
  run.final_checkpoint = cluster.spec.count(config::TaskType::kEvaluator) > 0;
  if (!env.sample_log_dir.empty()) run.sample_log = str(env.sample_log_dir, "/", cluster.task.type, "-", cluster.task.index, ".samples");
  run_session(task, [&] {
    if (plan.role == plan::Role::kWait) {
      log::info(task.name(), " has no work under strategy ", plan.strategy->name,
                "; waiting for the training tasks to finish");
      return;
    }
    if (job.strategy.elastic.on) return train_elastic(job, machine, spec, task, run);
    TaskConnections connections;
    connect_planned(job, plan, machine, session.cluster(), spec, task, connections, run);
    // Injected (bytes_per_pack=N): another bucket size than the job's, after the tasks agreed on it.
    job::JobConfig injected = job;
    if (fault.bytes_per_pack > 0) injected.strategy.bytes_per_pack = fault.bytes_per_pack;
    const trainer::RunSummary summary = trainer::run_training(injected, plan, run);
    // The final checkpoint is saved: an evaluator may stop after it.
    if (session.is_chief()) session.store().set(kFinalStepKey, std::to_string(summary.steps));
  });
}

}  // namespace dtrain::runtime
