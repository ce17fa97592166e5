// ClusterSession: this task's membership in a multi-task job.
//
// Constructing one joins the job: the chief starts the StoreServer on its address;
// every task connects (retrying until runtime.rendezvous_timeout), authenticates,
// announces itself, waits for all the others (printing every 5 s who is still
// missing), and compares a hash of the job config, the dtrain version and the world
// size with every other task; a mismatch is a ConfigError that says what differs.
// Afterwards a heartbeat thread reports this task's step to the chief every
// runtime.heartbeat_interval; check_health() throws PeerLost as soon as the chief
// reports a lost task or the chief itself cannot be reached. finish() is the final
// barrier of a normal end.
#pragma once

#include <atomic>
#include <functional>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "config/job_config.h"
#include "core/timer.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"

namespace dtrain::rendezvous {

struct SessionOptions {
  int listen_fd = -1;  // chief: serve on this inherited listening socket (from `dtrain launch`)
};

class ClusterSession {
 public:
  ClusterSession(const config::ClusterConfig& cluster, const config::JobConfig& job,
                 SessionOptions options = {});
  // Stops the heartbeats. If finish() was not reached, tells the chief that this
  // task failed, so the others stop at once instead of after a timeout.
  ~ClusterSession();
  ClusterSession(const ClusterSession&) = delete;
  ClusterSession& operator=(const ClusterSession&) = delete;

  const config::TaskId& task() const { return cluster_.task; }
  bool is_chief() const { return cluster_.task == cluster_.spec.chief(); }
  int world_size() const { return cluster_.spec.world_size(); }
  int rank() const { return cluster_.spec.rank(cluster_.task); }
  double join_seconds() const { return join_seconds_; }

  // The store, for requests from the thread that owns the session.
  StoreClient& store() { return *store_; }

  // Records the step this task reached. Heartbeats carry it: every
  // heartbeat_interval, and sooner (at most every 100 ms) while steps advance, so
  // the step named when a task is lost is at most ~100 ms old.
  void report_step(int64_t step);
  // Throws PeerLost if another task was lost or the chief cannot be reached.
  void check_health();
  // Called once, from the heartbeat thread, when the job is found to have failed
  // (the same message check_health() throws). The app uses it as a watchdog for a
  // main thread that is blocked where it cannot check (inside a collective).
  void on_failure(std::function<void(const std::string&)> callback);
  // Tells the chief this task is failing (the job fails with it).
  void fail(const std::string& message);
  // The final barrier: waits (as long as every task stays alive) until every task
  // got here, then leaves cleanly. The chief also waits for the others to leave.
  void finish();

 private:
  void wait_for_all_tasks();
  void compare_job_descriptions(const config::JobConfig& job);
  void heartbeat_loop();
  void stop_heartbeats();
  std::string describe(const config::TaskId& task) const;

  config::ClusterConfig cluster_;
  Credentials credentials_;
  double heartbeat_interval_ = 1.0;
  double rendezvous_timeout_ = 300.0;
  std::unique_ptr<StoreServer> server_;   // chief only
  std::unique_ptr<StoreClient> store_;    // requests
  std::unique_ptr<StoreClient> control_;  // heartbeats (the heartbeat thread's)
  double join_seconds_ = 0.0;
  Stopwatch started_;  // when the session began joining
  bool finished_ = false;

  std::atomic<int64_t> step_{-1};
  std::atomic<int64_t> last_sent_ms_{0};  // when the last heartbeat went out (steady clock)
  bool step_pending_ = false;             // guarded by mutex_: wake the heartbeat thread early
  int64_t chief_step_ = -1;  // the chief's last step, from heartbeat replies (heartbeat thread)
  std::thread heartbeat_thread_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::optional<std::string> failure_;  // guarded by mutex_
  std::function<void(const std::string&)> on_failure_;  // guarded by mutex_
};

}  // namespace dtrain::rendezvous
