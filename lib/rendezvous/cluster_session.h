// ClusterSession: this task's membership in a multi-task job.
//
// Constructing one joins the job: the chief starts the StoreServer on its address;
// every task connects (retrying until the rendezvous timeout), authenticates,
// announces itself, waits for all the others (printing every 5 s who is still
// missing), and compares its description of the job (the SessionSpec's agreement
// fields, plus the cluster, the dtrain version and the world size) with every other
// task; a mismatch is a ConfigError that says what differs. Each task also says
// which machine it is on (hosts()), so tasks learn which of them share one.
// Afterwards a heartbeat thread reports this task's step to the chief every
// runtime.heartbeat_interval; check_health() throws PeerLost as soon as the chief
// reports a lost task or the chief itself cannot be reached. finish() is the final
// barrier of a normal end.
#pragma once

#include <atomic>
#include <functional>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <utility>
#include <vector>

#include "config/cluster_spec.h"
#include "core/timer.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"

namespace dtrain::rendezvous {

// What a session needs to know: who, where, how long to wait, and what every task
// must agree on. Built by the task runtime (lib/runtime) from the job and the
// environment; the rendezvous knows nothing of models or strategies.
struct SessionSpec {
  config::ClusterConfig cluster;  // the cluster and this task
  Credentials credentials;        // job id and secret (auth.h)
  // Named fields every task must have equal, e.g. {"config_sha256", "3f2a..."};
  // the session adds cluster_sha256, dtrain_version and world_size.
  std::vector<std::pair<std::string, std::string>> agreement;
  // The JSON document the first agreement field hashes (the job's config without
  // what may differ between tasks), or "": published with it, so that a task whose
  // hash differs is told which keys differ.
  std::string agreement_document;
  double rendezvous_timeout = 300.0;  // seconds to wait for every task to join
  double heartbeat_interval = 1.0;    // seconds between heartbeats
  double heartbeat_timeout = 10.0;    // seconds of silence after which a task is lost
  int listen_fd = -1;  // chief: serve on this inherited listening socket (from `dtrain launch`)
  // chief: serve with this store, already running (the env:// registration's);
  // its tasks' addresses are set from `cluster`.
  std::shared_ptr<StoreServer> server;
  // Tasks ("evaluator:0", "worker:1") whose loss the job survives (ServerOptions::expendable).
  std::set<std::string> expendable;
  // runtime.stall_timeout (the chief's server: ServerOptions::stall_timeout).
  double stall_timeout = 0.0;
  // cluster_digest(cluster.spec) when the caller has it already ("": the session
  // computes it). `dtrain bench rendezvous` computes it once for the thousand
  // tasks a process of it simulates; a real task computes it once anyway.
  std::string cluster_digest;
  // strategy.elastic: the job may start without some training tasks (chief and
  // workers; never the chief, never another kind). Once `min_training_tasks`
  // joined, the chief waits `settle_seconds` more for the rest, then starts
  // with those that came: the store's first membership (membership/0) lists
  // them, the roster gives the others no machine yet, and they join the
  // running job when they come. 0: every task must join.
  int min_training_tasks = 0;
  double settle_seconds = 0.0;
};

// The short digest of a cluster (every task and address) that tasks compare.
std::string cluster_digest(const config::ClusterSpec& cluster);

class ClusterSession {
 public:
  // (By value: a caller that has no more use for the spec moves it in, and its
  // cluster, which has N addresses, is not copied.)
  explicit ClusterSession(SessionSpec spec);
  // Stops the heartbeats. If finish() was not reached, tells the chief that this
  // task failed, so the others stop at once instead of after a timeout.
  ~ClusterSession();
  ClusterSession(const ClusterSession&) = delete;
  ClusterSession& operator=(const ClusterSession&) = delete;

  const config::ClusterConfig& cluster() const { return cluster_; }
  const config::TaskId& task() const { return cluster_.task; }
  bool is_chief() const { return cluster_.task == cluster_.spec.chief(); }
  int world_size() const { return cluster_.spec.world_size(); }
  int rank() const { return cluster_.spec.rank(cluster_.task); }
  double join_seconds() const { return join_seconds_; }
  // The training tasks that had not joined when the job started (elastic: the
  // chief started without them after its settle time); known on the chief only.
  const std::vector<std::string>& absent_at_start() const { return absent_at_start_; }
  // How far the chief's wall clock is ahead of this machine's, in microseconds
  // and within how much (StoreClient::clock_offset; 0 on the chief). A few round
  // trips to the chief.
  trace::ClockOffset measure_clock_offset();

  // The job's store, for requests from the thread that owns the session.
  Store& store() { return *store_; }

  // Records the step this task reached. Heartbeats carry it: every
  // heartbeat_interval, and sooner (at most every 100 ms) while steps advance, so
  // the step named when a task is lost is at most ~100 ms old.
  void report_step(int64_t step);
  // Sends a heartbeat now unless one went out in the last 50 ms (its reply
  // brings the membership generation and any failure sooner): for a wait
  // that cannot tell a lost peer from a slow one.
  void beat_soon();
  // The step last given to report_step() (-1 before the first).
  int64_t reported_step() const { return step_.load(); }
  // Throws PeerLost if another task was lost or the chief cannot be reached.
  void check_health();
  // The membership's generation as the last heartbeat reply said: how many
  // times the job's training tasks changed (one was lost, or came up again
  // after it was), the store's membership/generation; an elastic job re-forms
  // when it grows.
  int64_t membership_generation() const { return membership_.load(); }
  // The job's failure as the heartbeats learn it (names the lost task, its address
  // and last step), waiting up to `seconds` for it; nullopt if none is known by
  // then. For a task that saw a peer vanish first through a collective.
  std::optional<std::string> wait_for_failure(double seconds);
  // Called once, from the heartbeat thread, when the job is found to have failed
  // (the same message check_health() throws). The app uses it as a watchdog for a
  // main thread that is blocked where it cannot check (inside a collective).
  void on_failure(std::function<void(const std::string&)> callback);
  // Tells the chief this task is failing (the job fails with it).
  void fail(const std::string& message);
  // The final barrier: waits (as long as every task stays alive) until every task
  // got here, then leaves cleanly; an expendable task that was lost is not waited
  // for. The chief also waits for the others to leave.
  void finish();
  // Hang reports. When a report is asked for (the chief's server saw a stall, or
  // some task got SIGUSR1), every task's heartbeat thread publishes `source()`
  // (what this task is doing) as report/<generation>/<task>; on the chief a
  // thread of its own then collects every task's (waiting up to 5 s) and hands
  // them to `handler` with the reason. Set both before the first step.
  using Reports = std::map<std::string, std::string>;  // task -> its report ("" = none came)
  void set_report_source(std::function<std::string()> source);
  void on_reports(std::function<void(const std::string& reason, const Reports& reports)> handler);
  // Asks for a report from a signal handler (async-signal-safe: sets a flag that
  // this process's heartbeat thread acts on).
  static void request_report_from_signal();
  // Asks for a report now, saying why (from a normal thread). `once_per_job`:
  // only the first task of the job to ask this way does (a fault that every
  // task finds at the same moment gives one report, not one per task).
  void request_report(const std::string& reason, bool once_per_job = false);

  // Drops out of the job as a killed process would: stops the heartbeats and
  // closes both connections without telling the chief (the server sees them
  // close). For `dtrain bench rendezvous` and tests, which simulate many tasks
  // in one process.
  void sever();
  // This task's incarnation: 1, or more when it was started again into a running job.
  int64_t incarnation() const { return incarnation_; }
  // Which machine each task runs on (core/host.h's host_identity(), as each task
  // reported it when it joined), by task name ("worker:1").
  // (Read from the chief's roster on the first call: O(N), which a task of a
  // large job pays only if it needs it.) A task that was absent when the job
  // started (SessionSpec::min_training_tasks) has "" until it joins; each call
  // asks the store for those (one request, only while some are unknown).
  const std::map<std::string, std::string>& hosts() const;
  // How many of the job's tasks run on this task's machine, itself included.
  int tasks_on_this_host() const;

 private:
  void join_and_agree();
  std::string description() const;
  std::vector<std::string> differences(const std::string& them, const std::string& their_value,
                                       const std::string& mine) const;
  double next_wait() const;
  // The tasks whose join value is missing from `values` (get_many of every
  // task's join key), described; `joined` gets the others' names.
  std::vector<std::string> missing_tasks(const std::vector<std::optional<std::string>>& values,
                                         std::vector<std::string>* joined) const;
  std::string make_roster(const std::string& mine, const std::string& join_value);
  // The chief's wait for every task's join value; an elastic job's chief may
  // start without some training tasks (SessionSpec::min_training_tasks): their
  // values are "" and absent_at_start_ names them.
  std::vector<std::string> wait_for_joins(const std::vector<std::string>& keys, const std::string& join_value);
  // Whether the job may start without the tasks whose values are missing.
  bool may_start_without(const std::vector<std::optional<std::string>>& values) const;
  // Sets this task's join value, waits for the chief's roster and returns it.
  std::string wait_for_roster(const std::string& join_value);
  void read_roster() const;
  void learn_unknown_hosts() const;
  void heartbeat_loop(const std::string& host, int port, const ClientOptions& options);
  void wait_for_control();
  bool stopping();
  void stop_heartbeats();
  void handle_reports(int64_t generation);  // on the heartbeat thread, for each new generation
  void doctor_loop();                       // the chief's report collector
  std::string describe(const config::TaskId& task) const;

  config::ClusterConfig cluster_;
  Credentials credentials_;
  double heartbeat_interval_ = 1.0;
  double rendezvous_timeout_ = 300.0;
  std::shared_ptr<StoreServer> server_;   // chief only
  std::unique_ptr<StoreClient> store_;    // requests
  std::unique_ptr<StoreClient> control_;  // heartbeats: set (guarded by mutex_) and used by the heartbeat thread
  std::exception_ptr control_error_;      // guarded by mutex_: why control_ could not connect
  double join_seconds_ = 0.0;
  Stopwatch started_;  // when the session began joining
  bool finished_ = false;
  std::set<std::string> expendable_;
  std::vector<std::pair<std::string, std::string>> agreement_;
  std::string agreement_document_;
  bool publish_document_ = false;
  std::string cluster_digest_;
  int64_t incarnation_ = 1;
  int min_training_tasks_ = 0;
  double settle_seconds_ = 0.0;
  std::vector<std::string> absent_at_start_;
  std::string roster_;  // the chief's roster (make_roster)
  mutable std::map<std::string, std::string> hosts_;  // from roster_, on the first hosts()

  std::atomic<int64_t> step_{-1};
  std::atomic<int64_t> membership_{0};
  std::atomic<int64_t> last_sent_ms_{0};  // when the last heartbeat went out (steady clock)
  bool step_pending_ = false;             // guarded by mutex_: wake the heartbeat thread early
  int64_t chief_step_ = -1;  // the chief's last step, from heartbeat replies (heartbeat thread)
  std::thread heartbeat_thread_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::optional<std::string> failure_;  // guarded by mutex_
  // Hang reports (the heartbeat thread's, and the chief's doctor thread):
  std::function<std::string()> report_source_;
  std::function<void(const std::string&, const Reports&)> report_handler_;
  std::optional<std::string> report_reason_;  // guarded by mutex_: request_report()'s, for the heartbeat thread
  bool report_once_ = false;                  // ... asked with once_per_job
  int64_t reports_seen_ = 0;                  // the heartbeat thread's
  int64_t reports_to_collect_ = 0;            // guarded by mutex_: the doctor's next generation
  std::thread doctor_thread_;
  std::unique_ptr<StoreClient> doctor_store_;  // the doctor thread's
  ClientOptions client_options_;
  std::function<void(const std::string&)> on_failure_;  // guarded by mutex_
};

// Asks a running job's tasks for a hang report from outside the job (`dtrain
// launch --hostfile` on SIGUSR1, whose chief is on another host): connects to
// the chief's store with the chief's name and the job's credentials (as the
// chief's own report thread does), counts a new report generation and says
// `reason`; the chief prints the report. Throws what connecting throws.
void ask_for_report(const config::ClusterSpec& cluster, const Credentials& credentials, const std::string& reason);

}  // namespace dtrain::rendezvous
