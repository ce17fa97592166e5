// Implementation of cluster_task.h.
#include "runtime/cluster_task.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "comm/flight_recorder.h"
#include "comm/gloo/gloo_communicator.h"
#if DTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif
#include "comm/shm/shm_communicator.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "kernels/device.h"
#include "plan/machine.h"
#include "rendezvous/auth.h"
#include "runtime/hang_report.h"

namespace dtrain::runtime {

namespace {
// The task whose session asks for a report when a library thread's exception
// ends the process (std::terminate has no way to reach it otherwise).
std::atomic<ClusterTask*> g_reporting_task{nullptr};
}  // namespace

rendezvous::SessionSpec session_spec(const job::JobConfig& job, const config::ClusterConfig& cluster,
                                     const Environment& env) {
  rendezvous::SessionSpec spec;
  spec.cluster = cluster;
  // The job's name: DTRAIN_JOB_ID, else runtime.job_id, else the resolver's
  // ("slurm-<job>.<step>"), else one derived from the cluster.
  const std::string& config_job_id = job.runtime.job_id.empty() ? cluster.job_id : job.runtime.job_id;
  spec.credentials = rendezvous::load_credentials(
      {env.job_id, config_job_id, env.job_secret, job.runtime.secret_file}, cluster.spec);
  spec.agreement = {{"config_sha256", sha256_hex(job.agreement_json).substr(0, 16)}};
  spec.agreement_document = job.agreement_json;
  spec.rendezvous_timeout = job.runtime.rendezvous_timeout;
  spec.heartbeat_interval = job.runtime.heartbeat_interval;
  spec.heartbeat_timeout = job.runtime.heartbeat_timeout;
  spec.stall_timeout = job.runtime.stall_timeout;
  spec.listen_fd = env.listen_socket();
  if (job.strategy.elastic.on) {
    spec.min_training_tasks = static_cast<int>(job.strategy.elastic.min_workers);
    spec.settle_seconds = job.strategy.elastic.settle_seconds;
  }
  return spec;
}

rendezvous::SessionSpec bench_session_spec(const std::string& bench, const std::string& parameters,
                                           const Environment& env) {
  const config::ClusterConfig cluster =
      env.resolve_cluster(config::FileCluster{bench, {}, {}}, config::RuntimeSpec{}, "");
  rendezvous::SessionSpec spec;
  spec.cluster = cluster;
  spec.credentials = rendezvous::load_credentials({env.job_id, cluster.job_id, env.job_secret, ""}, cluster.spec);
  spec.agreement = {{"bench", str(bench, " ", parameters)}};
  spec.listen_fd = env.listen_socket();
  return spec;
}

ClusterTask::ClusterTask(const rendezvous::SessionSpec& spec)
    : name_(spec.cluster.task.str()),
      job_id_(spec.credentials.job_id),
      heartbeat_interval_(spec.heartbeat_interval),
      session_(spec) {
  // Watchdog: normally the main thread notices a failed job at its next step and
  // exits with PeerLost. If it is stuck where it cannot look (inside a collective
  // with a stalled peer, whose own deadline is longer), end the process anyway a
  // little later, with the same message and exit code.
  session_.on_failure([task = name_](const std::string& why) {
    std::thread([task, why] {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      comm::log_flight_record(task);
      std::fprintf(stderr, "%s\n", log::line("error: ", why).c_str());
      std::fflush(stderr);
      std::_Exit(to_int(ExitCode::kPeerLost));
    }).detach();
  });
  // Hang reports (hang_report.h): every task says where it is when asked; the
  // chief prints the diagnosis; SIGUSR1 asks for one without stopping the job.
  session_.set_report_source([this] { return local_report(session_.reported_step()); });
  session_.on_reports([](const std::string& reason, const rendezvous::ClusterSession::Reports& reports) {
    log::warn(diagnose(reason, reports));
  });
  // A library's own thread that throws ends the process through std::terminate:
  // Gloo's I/O thread does when a peer sends more bytes than this task posted
  // (the tasks disagree on a collective). Say so, with the flight record, and
  // exit with the runtime error code instead of aborting with no word.
  std::set_terminate([] {
    std::string what = "(no exception)";
    if (const std::exception_ptr e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
        what = "(not a std::exception)";
      }
    }
    ClusterTask* const reporting = g_reporting_task.load();
    comm::log_flight_record(reporting ? reporting->name() : std::string("this task"));
    std::fprintf(stderr, "%s\n",
                 log::line("error: ", str("a thread of the collectives' library failed: ", what,
                                          " (when a peer sent more bytes than this task posted, the tasks disagree "
                                          "on a collective's size: see its last collectives and the others' logs)"))
                     .c_str());
    std::fflush(stderr);
    if (reporting)
      reporting->report_before_exit(str("a thread of the collectives' library failed on ", reporting->name(), ": ", what));
    std::_Exit(to_int(ExitCode::kRuntime));
  });
  g_reporting_task.store(this);
  struct sigaction action {};
  action.sa_handler = [](int) { rendezvous::ClusterSession::request_report_from_signal(); };
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, nullptr);
}

void ask_chief_for_report(const config::ClusterSpec& cluster, const std::string& job_id, const std::string& secret) {
  try {
    rendezvous::ask_for_report(cluster, {job_id, secret}, "asked for with SIGUSR1 (to dtrain launch)");
  } catch (const std::exception& e) {
    log::warn("launch: could not ask the chief for a hang report: ", e.what());
  }
}

ClusterTask::~ClusterTask() {
  ClusterTask* self = this;
  g_reporting_task.compare_exchange_strong(self, nullptr);
}

void ClusterTask::report_before_exit(const std::string& reason) {
  session_.request_report(reason, true);
  std::this_thread::sleep_for(std::chrono::duration<double>(report_round_seconds()));
}

std::vector<std::string> ClusterTask::host_of_rank() const {
  const config::ClusterConfig& cluster = session_.cluster();
  std::vector<std::string> hosts(static_cast<size_t>(session_.world_size()));
  const std::map<std::string, std::string>& known = session_.hosts();  // (one store request while some are unknown)
  for (const config::TaskId& t : cluster.spec.all_tasks())
    if (const int r = cluster.spec.rank(t); r >= 0) hosts[static_cast<size_t>(r)] = known.at(t.str());
  return hosts;
}

int ClusterTask::member_rank() const { return plan::rank_among(session_.rank(), members_); }

int ClusterTask::member_count() const {
  return members_.empty() ? session_.world_size() : static_cast<int>(members_.size());
}

std::unique_ptr<comm::Communicator> ClusterTask::connect_training_tasks(const std::string& prefix,
                                                                        double timeout_seconds,
                                                                        plan::TasksGroup group, bool full_mesh) {
  const config::ClusterConfig& cluster = session_.cluster();
  // Gloo connects through the job's rendezvous store; its TCP device listens on
  // this task's host (the one the others know it by).
  comm::GlooOptions gloo;
  gloo.rank = member_rank();
  gloo.size = member_count();
  gloo.prefix = prefix;
  gloo.hostname = config::parse_host_port(cluster.spec.address(cluster.task), "this task's address").host;
  gloo.timeout_seconds = timeout_seconds;
  gloo.full_mesh = full_mesh;
  gloo.algorithm =
      group == plan::TasksGroup::kGlooRing ? comm::AllReduceAlgorithm::kRing : comm::AllReduceAlgorithm::kGlooDefault;
  if (group != plan::TasksGroup::kHierarchical)
    return comm::make_recorded(comm::make_gloo_communicator(session_.store(), gloo), "workers");

  const comm::HostLayout layout = comm::HostLayout::from_keys(member_hosts());
  const int host = layout.host_of[static_cast<size_t>(gloo.rank)];
  const int local_rank = layout.local_rank_of[static_cast<size_t>(gloo.rank)];
  std::unique_ptr<comm::Communicator> local =
      connect_shared_memory(str(prefix, "host", host, "/"), timeout_seconds, local_rank,
                            static_cast<int>(std::count(layout.host_of.begin(), layout.host_of.end(), host)));
  std::unique_ptr<comm::Communicator> leaders;
  if (local_rank == 0) {  // this machine's leader: one Gloo rank per machine
    comm::GlooOptions across = gloo;
    across.rank = host;
    across.size = layout.hosts();
    across.prefix = prefix + "leaders/";
    leaders = comm::make_gloo_communicator(session_.store(), across);
  }
  if (gloo.rank == 0)
    log::info("comm: hierarchical all-reduce: ", layout.hosts(), " machine(s), ", gloo.size,
              " tasks; shared memory within a machine, Gloo between their leaders");
  return comm::make_recorded(
      comm::make_hierarchical_communicator(gloo.rank, layout, std::move(local), std::move(leaders)), "workers");
}

std::vector<std::string> ClusterTask::member_hosts() const {
  std::vector<std::string> hosts = host_of_rank();
  if (members_.empty()) return hosts;
  std::vector<std::string> of_members;
  for (int r : members_) of_members.push_back(hosts.at(static_cast<size_t>(r)));
  return of_members;
}

std::unique_ptr<comm::Communicator> ClusterTask::connect_shared_memory(const std::string& prefix,
                                                                       double timeout_seconds, int rank, int size) {
  comm::ShmOptions shm;
  shm.rank = rank;
  shm.size = size;
  shm.prefix = prefix;
  shm.job_id = job_id_;
  shm.timeout_seconds = timeout_seconds;
  // A member killed mid-collective leaves no mark in the segment: the heartbeats
  // tell the waits (PeerLost, as Gloo's broken connection would).
  shm.peer_lost = [this] { return peer_lost_now(); };
  return comm::make_shm_communicator(session_.store(), shm);
}

strategy::GridGroups ClusterTask::connect_grid_groups(const strategy::ParallelGrid& grid, comm::Communicator& workers,
                                                      const std::string& prefix, double timeout_seconds) {
  const std::vector<std::string> hosts = member_hosts();
  strategy::GroupMaker maker;
  maker.how = "shared memory";
  maker.make = [&](strategy::GridAxis axis, int color, int index, int size) -> std::unique_ptr<comm::Communicator> {
    // (a pipeline's stages send to each other: Gloo, which shared memory cannot)
    if (axis == strategy::GridAxis::kPipeline || !strategy::axis_on_one_machine(grid, axis, hosts)) return nullptr;
    const std::string group = str(prefix, strategy::axis_name(axis), "/", color, "/");
    return comm::make_recorded(connect_shared_memory(group, timeout_seconds, index, size),
                               str("workers/", strategy::axis_name(axis), color));
  };
  strategy::GridGroups groups = strategy::make_grid_groups(workers, grid, maker);
  if (workers.rank() == 0) log::info("comm: the grid's groups (", grid.describe(), "): ", groups.describe());
  return groups;
}

namespace {

#if DTRAIN_HAVE_NCCL
// An NCCL group of `size` tasks under `prefix`, this one `rank`, on `device`.
std::unique_ptr<comm::NcclCommunicator> join_nccl(rendezvous::ClusterSession& session, const std::string& prefix,
                                                  double timeout_seconds, const Device& device, int rank, int size,
                                                  const std::string& name,
                                                  std::function<std::optional<std::string>()> peer_lost) {
  comm::NcclOptions options;
  options.rank = rank;
  options.size = size;
  options.device = device.index;
  options.prefix = prefix;
  options.timeout_seconds = timeout_seconds;
  // The heartbeats' view, asked without waiting at every poll of every wait.
  options.peer_lost = peer_lost;
  options.compute_stream = kernels::compute_stream(device);
  options.name = name;
  return std::make_unique<comm::NcclCommunicator>(session.store(), options);
}
#endif

}  // namespace

std::unique_ptr<comm::Communicator> ClusterTask::connect_nccl(const std::string& prefix, double timeout_seconds,
                                                              const Device& device) {
  if (member_count() < 2) return nullptr;
#if DTRAIN_HAVE_NCCL
  auto nccl = join_nccl(session_, prefix, timeout_seconds, device, member_rank(), member_count(),
                        "the training tasks' NCCL group", [this] { return peer_lost_now(); });
  if (member_rank() == 0)
    log::info("comm: gradients all-reduced by NCCL (", comm::nccl_version(), ") on the GPUs of ",
              member_count(), " tasks; other collectives over Gloo");
  return nccl;
#else
  (void)prefix, (void)timeout_seconds, (void)device;
  throw ConfigError("strategy.communication: NCCL is not in this build of dtrain");
#endif
}

std::unique_ptr<comm::Communicator> ClusterTask::connect_nccl_pair(const std::string& prefix, double timeout_seconds,
                                                                   const Device& device, int rank) {
#if DTRAIN_HAVE_NCCL
  return join_nccl(session_, prefix, timeout_seconds, device, rank, 2, str("the NCCL pair ", prefix),
                   [this] { return peer_lost_now(); });
#else
  (void)prefix, (void)timeout_seconds, (void)device, (void)rank;
  throw ConfigError("strategy.communication: NCCL is not in this build of dtrain");
#endif
}

std::optional<std::string> ClusterTask::peer_lost_now() {
  if (std::optional<std::string> failure = session_.wait_for_failure(0.0)) return failure;
  // An elastic job's member was lost: the group's waits give up so that the
  // members can re-form (a killed member leaves no mark in shared memory).
  if (members_.empty()) return std::nullopt;
  session_.beat_soon();
  if (session_.membership_generation() > membership_seen_)
    return str("the job's membership changed (a training task was lost; generation ",
               session_.membership_generation(), ")");
  return std::nullopt;
}

void ClusterTask::rethrow_collective_failure(const Error& error) {
  // A peer that died closes its Gloo connections at once; the chief's store sees
  // its control connection close just as fast and tells every heartbeat within
  // one interval. Wait that long (bounded) for the version that names the task.
  // A CommError is the tasks disagreeing on a collective: every task is asked
  // what it called first, and the same wait gives the chief time to print which
  // one differs.
  if (dynamic_cast<const CommError*>(&error))
    session_.request_report(str("a collective failed on ", name_, ": ", error.what()), true);
  const std::optional<std::string> failure = session_.wait_for_failure(report_round_seconds());
  if (!failure) {
    if (dynamic_cast<const TimeoutError*>(&error)) throw TimeoutError(error.what());
    if (dynamic_cast<const CommError*>(&error)) throw CommError(error.what());
    throw PeerLost(error.what());
  }
  const std::string seen = error.what();
  if (*failure == seen) throw PeerLost(*failure);  // the heartbeat's own message
  if (seen.rfind(*failure, 0) == 0) {
    // The collective's error is the heartbeat's message and where it struck: say only where.
    std::string where = seen.substr(failure->size());
    if (where.size() > 3 && where.rfind(" (", 0) == 0 && where.back() == ')') where = where.substr(2, where.size() - 3);
    throw PeerLost(str(*failure, " (", name_, " saw it first in ", where, ")"));
  }
  throw PeerLost(str(*failure, " (", name_, " saw it first as: ", seen, ")"));
}

}  // namespace dtrain::runtime
