// `dtrain run` as one task of a multi-task job: resolve the cluster (TF_CONFIG
// rules), join it through the chief's rendezvous store, train with heartbeats and
// health checks after every step, and pass the final barrier. Also the test hooks
// DTRAIN_INJECT=kill@step=N and kill@ckpt_byte=N, which make this task SIGKILL
// itself at step N or in the middle of writing a checkpoint (what `dtrain launch
// --inject` uses to show failure handling and crash-safe saves).
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
#include <cstdlib>
#include <string>

#include "checkpoint/durable_file.h"
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

InjectedFault injected_fault() {
  InjectedFault fault;
  const char* inject = std::getenv("DTRAIN_INJECT");
  if (!inject || !*inject) return fault;
  const std::string text = inject;
  for (auto [prefix, target] : {std::pair{"kill@step=", &fault.kill_step},
                                std::pair{"kill@ckpt_byte=", &fault.kill_ckpt_byte}}) {
    const std::string p = prefix;
    if (text.rfind(p, 0) != 0) continue;
    const std::string digits = text.substr(p.size());
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(digits.c_str(), &end, 10);
    if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos && errno == 0 &&
        *end == '\0' && n > 0) {
      *target = n;
      return fault;
    }
  }
  throw ConfigError(str("DTRAIN_INJECT='", text, "': expected kill@step=N or kill@ckpt_byte=N with N > 0"));
}

int64_t arm_injected_fault() {
  const InjectedFault fault = injected_fault();
  if (fault.kill_ckpt_byte > 0)
    checkpoint::set_write_hook(static_cast<uint64_t>(fault.kill_ckpt_byte),
                               [](uint64_t) { std::raise(SIGKILL); });  // mid-save, for tests and demos
  return fault.kill_step;
}

int run_in_cluster(const config::JobConfig& job, const config::ClusterConfig& cluster,
                   trainer::RunOptions run) {
  const std::string task = cluster.task.str();
  // Log lines name the task ("[worker:1] dtrain: ..."); `dtrain launch` does not
  // add its own prefix to lines that already carry it.
  log::set_prefix("[" + task + "] ");
  const int64_t kill_step = arm_injected_fault();

  rendezvous::SessionOptions options;
  options.listen_fd = listen_fd_from_environment();
  rendezvous::ClusterSession session(cluster, job, options);
  // Watchdog: normally the main thread notices a failed job at its next step and
  // exits with PeerLost. If it is stuck where it cannot look (inside a collective
  // with a stalled peer, whose own deadline is longer), end the process anyway a
  // little later, with the same message and exit code.
  session.on_failure([task](const std::string& why) {
    std::thread([task, why] {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      std::fprintf(stderr, "[%s] %s%s\n", task.c_str(), kErrorPrefix, why.c_str());
      std::fflush(stderr);
      std::_Exit(to_int(ExitCode::kPeerLost));
    }).detach();
  });
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
  } catch (const Preempted&) {
    throw;  // every task agreed to stop after the same step: not a failure of the job
  } catch (const Error& e) {
    session.fail(str(task, ": ", e.what()));
    throw;
  }
  return 0;
}

}  // namespace dtrain::app
