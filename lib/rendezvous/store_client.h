// StoreClient: one authenticated TCP connection to the chief's StoreServer, with
// a deadline on every call; the Store of a multi-task job. Used from one thread at
// a time.
//
// Errors: a refused connection is retried until the connect deadline (then
// TimeoutError naming the chief's address); a lost connection or a reply saying
// the job failed is PeerLost; a handshake the server refuses (wrong job, wrong
// secret) is ConfigError.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/trace.h"
#include "rendezvous/auth.h"
#include "rendezvous/store.h"

namespace dtrain::rendezvous {

struct ClientOptions {
  Credentials credentials;
  std::string task;             // this task, "worker:1"
  std::string role = "store";   // "store" for requests, "control" for heartbeats
  std::string server_name;      // the server in messages, e.g. "the chief (chief:0 at host:2222)"
  double connect_timeout = 300.0;    // seconds to keep retrying a refused connection
  double request_timeout = 30.0;     // seconds for one request/reply (waits add their own)
  // Send this task's proof of the secret together with its first requests
  // instead of waiting for the welcome first: one round trip fewer to the first
  // reply (the rendezvous' store connection). A rejected proof is then reported
  // by that first call.
  bool prove_with_first_request = false;
  // Called about every 5 s while the server cannot be reached yet.
  std::function<void(const std::string&)> on_waiting;
  // Asked between connection attempts: true gives up (RuntimeError).
  std::function<bool()> cancelled;
};

struct HeartbeatReply {
  std::optional<std::string> failure;  // why the job failed, if it did
  int64_t chief_step = -1;             // the last step the chief reported
  int64_t report_generation = 0;       // reports asked for so far (a new one: publish this task's)
  int64_t membership = 0;              // training tasks lost so far: the membership's generation
};

// This machine's address on the interface that reaches host:port (a UDP socket
// "connected" there: the kernel picks the route; nothing is sent). ConfigError
// naming `what` when the host does not resolve or has no route.
std::string local_address_toward(const std::string& host, int port, const std::string& what);

class StoreClient final : public Store {
 public:
  StoreClient(const std::string& host, int port, ClientOptions options);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // The Store calls, each one request with the request deadline (wait: its own).
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool wait(const std::vector<std::string>& keys, double timeout_seconds) override;
  // As few requests as the frames allow (a 4,096-task roster: a handful).
  std::vector<std::optional<std::string>> get_many(const std::vector<std::string>& keys) override;
  // Waits up to `timeout_seconds` for every key and returns their values, in one
  // request (nullopt when the wait timed out).
  std::optional<std::vector<std::string>> wait_get(const std::vector<std::string>& keys, double timeout_seconds);
  // Sets `key` and then does wait_get(keys): both requests in one write, one
  // round trip (how a task joins: its join value, then the chief's roster).
  std::optional<std::vector<std::string>> set_then_wait_get(const std::string& key, const std::string& value,
                                                            const std::vector<std::string>& keys, double timeout_seconds);
  // The number the server's welcome carried: for a control connection, this
  // task's incarnation (1 the first time its control connection came up in this
  // job, 2 after a restart, ...); 0 for a store connection.
  int64_t incarnation() const;
  // Reports this task's step; the reply says whether the job failed.
  HeartbeatReply heartbeat(int64_t step);
  // This task finishes normally: its disconnect will not count as a loss.
  void done();
  // This task is failing with `message`: the job fails with it.
  void fail(const std::string& message);
  // Closes the connection without a word, as the kernel does for a killed
  // process (`dtrain bench rendezvous` and tests simulate a kill with it). Every
  // later call fails with PeerLost.
  void sever();
  // How far the server's wall clock is ahead of this machine's, in microseconds:
  // of `samples` round trips, the one that took least time, assuming the server
  // read its clock halfway through it (NTP's estimate; off by at most half that
  // round trip, given as its uncertainty).
  trace::ClockOffset clock_offset(int samples = 8);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::rendezvous
