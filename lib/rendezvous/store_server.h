// StoreServer: the key-value store the chief serves to every task of the job over
// TCP (Asio), and the job's membership and health record.
//
// Each connection first passes the handshake in auth.h (within a deadline), then
// sends requests (set, get, add, wait with a deadline) and gets one reply each.
// A task's "control" connection also carries heartbeats with its step; the server
// declares a task lost when that connection closes before the task said it was
// done, or when no heartbeat came for heartbeat_timeout, and from then on every
// reply tells the other tasks that the job failed and why. Connections that fail
// the handshake, send garbage or oversized frames are dropped and logged
// (rate-limited); the job goes on: nothing a connection says before it proved
// the job secret changes the job (authenticated_server.h). All state lives on the server's one I/O thread. Each control
// connection that comes up counts in incarnation/<task> and sets status/<task>
// to "up", so a task restarted into a running job is told apart from its
// earlier self.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rendezvous/auth.h"

namespace dtrain::rendezvous {

struct ExpectedTask {
  std::string name;     // "worker:1"
  std::string address;  // "127.0.0.1:2223", for messages
};

struct ServerOptions {
  Credentials credentials;
  std::vector<ExpectedTask> tasks;  // every task of the job
  std::string chief;                // the chief's name: heartbeat replies carry its step
  double heartbeat_timeout = 10.0;  // seconds
  double handshake_timeout = 5.0;   // seconds a new connection has to authenticate
  // Tasks whose loss the job survives (an evaluator; workers under
  // parameter_server): the server records it in the store (status/<task> =
  // "lost", lost_count) instead of failing the job, and the task may come back.
  std::set<std::string> expendable;
  // runtime.stall_timeout: when no task's step has advanced for this long (while
  // their heartbeats still come), the server asks every task for a report of
  // where it is (report/generation), once per stall. 0: never.
  double stall_timeout = 0.0;
};

// The membership of the training tasks (chief and workers): the server keeps
// who trains now. A training task's loss (an expendable one) takes it out; a
// training task that set kRejoinKeyPrefix + its name (an elastic job's task
// that came back and agreed on the job) puts it back. Each change counts
// membership/generation up (heartbeat replies carry it) after writing
// membership/<generation>, the members joined by commas, each as
// name#incarnation ("worker:2#2": its second start).
inline constexpr const char* kRejoinKeyPrefix = "membership/rejoin/";

struct ServerState;  // the server's state, owned by its I/O thread (store_server.cpp)

class StoreServer {
 public:
  // Binds host:port (port 0: any free port), listens, and serves on a background
  // thread. A port in use is a ConfigError naming the address.
  StoreServer(const std::string& host, int port, ServerOptions options);
  // Serves on an already listening socket (inherited from `dtrain launch`).
  StoreServer(int listen_fd, ServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // Connections dropped for failing the handshake or the protocol.
  int rejected_connections() const;
  // The failed proofs of the job secret seen from connections that claimed one
  // of `tasks`: "worker:1 (2 failed proofs, from 127.0.0.1)", joined by "; ";
  // "" when none. They change nothing in the job (a warning each when they
  // happen); the chief names them when it gives up waiting for those tasks.
  std::string failed_proofs(const std::vector<std::string>& tasks) const;
  // Requests answered so far (heartbeats included; handshakes not), and the CPU
  // time the server's I/O thread has used: `dtrain bench rendezvous` reads both.
  int64_t requests_served() const;
  double cpu_seconds() const;
  // Sets the address a task is named with in messages (an env:// task's, once it
  // registered it).
  void set_task_address(const std::string& task, const std::string& address);
  // An elastic job that starts without some training tasks (`absent`, none of
  // them the chief): the first membership is the others. Writes membership/0
  // (the members as name#1) and status/<task> "absent" for each absent task
  // that never connected; the final barrier does not wait for those. Each
  // joins later as a returning task does (kRejoinKeyPrefix). Returns once done.
  void start_membership(const std::vector<std::string>& absent);
  // Blocks until every task has said it is done or has disconnected (or, once the
  // job failed, has been told so), or until `timeout_seconds` pass. Returns true
  // if all were through.
  bool wait_all_done(double timeout_seconds);

 private:
  std::shared_ptr<ServerState> impl_;
};

// Checks that this process could listen on `address` ("host:port"): the host is
// one of this machine's addresses and the port is free. Throws ConfigError
// naming `what` (e.g. "worker:1's address cluster.worker[1]") otherwise.
void check_can_listen(const std::string& address, const std::string& what);

}  // namespace dtrain::rendezvous
