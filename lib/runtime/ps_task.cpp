// A ps task of a parameter_server job, and the parameter_server facts the other
// roles share: which tasks the job survives losing, the variables' placement,
// the training workers.
#include <algorithm>
#include <csignal>

#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "ps/ps_server.h"
#include "ps/shard_store.h"
#include "runtime/task_roles.h"
#include "trainer/reporting/records.h"

namespace dtrain::runtime {

std::set<std::string> expendable_tasks(const config::ClusterSpec& cluster, bool workers) {
  std::set<std::string> out;
  for (const config::TaskId& t : cluster.all_tasks())
    if (t.is(config::TaskType::kEvaluator) || (workers && t.is(config::TaskType::kWorker) && !(t == cluster.chief())))
      out.insert(t.str());
  return out;
}

ps::Placement job_placement(const job::JobConfig& job, const config::ClusterSpec& cluster) {
  return ps::plan_placement(ps::model_variables(job.model, job.train.seed), cluster.count(config::TaskType::kPs),
                            job.strategy.partitioner);
}

// The training workers of a parameter_server job: every worker but the coordinator.
std::vector<std::string> training_workers(const config::ClusterSpec& cluster) {
  std::vector<std::string> out;
  for (const config::TaskId& t : cluster.all_tasks())
    if (t.is(config::TaskType::kWorker) && !(t == cluster.chief())) out.push_back(t.str());
  return out;
}

void run_ps_task(const job::JobConfig& job, const config::ClusterConfig& cluster, const Environment& env,
                 rendezvous::SessionSpec spec, int64_t kill_step, const trainer::RunOptions& run) {
  const std::string& summary_path = run.summary_path;
  const Stopwatch wall;
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
  if (run.stop_signal) (void)run.stop_signal();  // serves on through a SIGTERM (see task_roles.h)
  align_trace_clock(job, task);
  log::info(task.name(), " serves ", shards.elements(), " floats of variables (",
            job.strategy.mode == ps::UpdateMode::kSync    ? "sync"
            : job.strategy.mode == ps::UpdateMode::kStale ? "stale"
                                                          : "async",
            " updates) until the job ends");
  run_session(task, [&] {});
  log::info(task.name(), " applied ", server.version(), " updates");
  if (summary_path.empty()) return;
  trainer::PsTaskSummary summary;
  summary.world_size = static_cast<int64_t>(options.workers.size());
  summary.variable_floats = static_cast<int64_t>(shards.elements());
  summary.updates_applied = server.version();
  summary.wall_seconds = wall.seconds();
  trainer::write_ps_summary(summary_path, job, summary);
}

}  // namespace dtrain::runtime
