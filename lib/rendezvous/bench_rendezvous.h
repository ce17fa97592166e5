// The simulated tasks of `dtrain bench rendezvous` (apps/dtrain/bench_rendezvous.cpp
// runs the benchmark: one chief process with the real StoreServer, worker
// processes holding the other tasks, one more with the task it kills).
//
// A simulated task is a real ClusterSession on a thread of its own: it connects
// twice (store and control), authenticates, publishes its job description and
// machine, passes the barrier and sends heartbeats, exactly as `dtrain run` does
// before its first step. A TaskSlice holds a range of a bench job's tasks in
// this process. Times are steady-clock nanoseconds (CLOCK_MONOTONIC: the same
// clock in every process of this machine).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/cluster_session.h"

namespace dtrain::rendezvous {

// What every simulated task of one N needs to know; travels to the worker
// processes as one line on their stdin (the secret never on a command line).
struct BenchJob {
  int tasks = 0;                     // N: chief:0 plus workers 0 .. N-2
  int port = 0;                      // the chief's store on 127.0.0.1
  Credentials credentials;
  double heartbeat_interval = 1.0;
  double heartbeat_timeout = 10.0;
  double rendezvous_timeout = 120.0;

  std::string to_line() const;
  static BenchJob from_line(const std::string& line);  // ConfigError when malformed
};

// The bench job's cluster: chief:0 on the store's port, N-1 workers.
config::ClusterSpec bench_cluster(const BenchJob& job);
// Task `index` of the bench job (0: the chief, i: worker:i-1) in `cluster`, with
// a job description of the size a real one has.
SessionSpec bench_task_spec(const BenchJob& job, int index, const config::ClusterSpec& cluster);

// The ServerOptions of the bench job's store.
ServerOptions bench_server_options(const BenchJob& job);

int64_t steady_now_ns();

class TaskSlice {
 public:
  // Prepares tasks [first, first + count): a thread each, waiting for start().
  TaskSlice(const BenchJob& job, int first, int count, const std::shared_ptr<StoreServer>& server = nullptr);
  // The survivors tell the chief they stopped (the chief's session goes last).
  ~TaskSlice();
  TaskSlice(const TaskSlice&) = delete;
  TaskSlice& operator=(const TaskSlice&) = delete;

  // Every task starts joining.
  void start();
  // Returns when every task passed the barrier; RuntimeError naming the first
  // task that failed.
  void wait_until_joined();
  int64_t last_joined_ns() const { return last_joined_ns_; }
  // Waits until every task here knows the job failed, at most `seconds`; returns
  // when each learned it (steady ns) and counts in `named` those whose message
  // names `lost`. RuntimeError when some never did.
  std::vector<int64_t> wait_for_failure(const std::string& lost, double seconds, int& named);

 private:
  int first_ = 0, tasks_ = 0;
  std::vector<SessionSpec> specs_;
  std::vector<std::unique_ptr<ClusterSession>> sessions_;
  std::vector<std::string> errors_;
  std::vector<int64_t> joined_;
  std::vector<std::thread> threads_;
  // The gate every thread waits at: one futex wake releases them all at once (a
  // condition variable handed its mutex to one thread after another).
  std::atomic<bool> open_{false};
  int64_t last_joined_ns_ = 0;
};

}  // namespace dtrain::rendezvous
