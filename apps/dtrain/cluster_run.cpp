// `dtrain run` as one task of a multi-task job: resolve the cluster (TF_CONFIG
// rules), join it through the chief's rendezvous store, train with heartbeats and
// health checks after every step, and pass the final barrier. Also the test hook
// DTRAIN_INJECT=kill@step=N, which makes this task SIGKILL itself at step N (what
// `dtrain launch --inject` uses to show failure handling).
#include <csignal>
#include <cstdlib>
#include <string>

#include "comm/gloo_communicator.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "rendezvous/cluster_session.h"
#include "trainer/trainer.h"

namespace dtrain::app {
namespace {

int listen_fd_from_environment() {
  const char* fd = std::getenv("DTRAIN_LISTEN_FD");
  return fd && *fd ? std::atoi(fd) : -1;
}

}  // namespace

int64_t injected_kill_step() {
  const char* inject = std::getenv("DTRAIN_INJECT");
  if (!inject || !*inject) return -1;
  const std::string text = inject;
  const std::string prefix = "kill@step=";
  char* end = nullptr;
  const long long step = text.rfind(prefix, 0) == 0 ? std::strtoll(text.c_str() + prefix.size(), &end, 10) : -1;
  if (step <= 0 || !end || *end != '\0')
    throw ConfigError(str("DTRAIN_INJECT='", text, "': expected kill@step=N with N > 0"));
  return step;
}

int run_in_cluster(const config::JobConfig& job, const config::ClusterConfig& cluster,
                   trainer::RunOptions run) {
  const std::string task = cluster.task.str();
  // Log lines name the task ("[worker:1] dtrain: ..."); `dtrain launch` does not
  // add its own prefix to lines that already carry it.
  log::set_prefix("[" + task + "] ");
  const int64_t kill_step = injected_kill_step();

  rendezvous::SessionOptions options;
  options.listen_fd = listen_fd_from_environment();
  rendezvous::ClusterSession session(cluster, job, options);
  run.write_metrics = session.is_chief();
  try {
    if (session.rank() < 0) {
      log::info(task, " has no work under strategy ", job.strategy.type,
                "; waiting for the training tasks to finish");
    } else {
      std::unique_ptr<comm::Communicator> workers;
      if (job.strategy.type == "multi_worker_mirrored") {
        // Gloo connects through the job's rendezvous store; its TCP device listens
        // on this task's host (the one the others know it by).
        comm::GlooOptions gloo;
        gloo.rank = session.rank();
        gloo.size = session.world_size();
        gloo.prefix = "comm/workers/";
        gloo.hostname = config::parse_host_port(cluster.spec.address(cluster.task), "this task's address").host;
        gloo.timeout_seconds = job.runtime.heartbeat_timeout + 20.0;
        workers = comm::make_gloo_communicator(session.store(), gloo);
        run.workers = workers.get();
      }
      run.on_step = [&](int64_t step) {
        if (step == kill_step) std::raise(SIGKILL);  // fault injection for tests and demos
        session.report_step(step);
        session.check_health();
      };
      trainer::run_training(job, run);
    }
    session.finish();
  } catch (const PeerLost&) {
    throw;  // the chief already knows; nothing to report
  } catch (const Error& e) {
    session.fail(str(task, ": ", e.what()));
    throw;
  }
  return 0;
}

}  // namespace dtrain::app
