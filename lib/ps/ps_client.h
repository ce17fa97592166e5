// The client side of the ps protocol: PsChannel is one authenticated connection
// to one ps task with a deadline on every reply; PsGroup is a task's channels to
// every ps of the job, with the requests that go to all of them at once (one
// request per ps, not per tensor). Used from one thread at a time.
//
// Errors: a ps that cannot be reached within the connect deadline is
// TimeoutError naming it; a connection that closes is PeerLost naming the ps; a
// reply later than the request deadline is TimeoutError; a refused handshake is
// ConfigError.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "ps/placement.h"
#include "ps/ps_wire.h"
#include "rendezvous/auth.h"

namespace dtrain::ps {

struct PsClientOptions {
  rendezvous::Credentials credentials;
  std::string task;                // this task, "worker:1"
  double connect_timeout = 300.0;  // seconds to keep retrying a ps that refuses connections
  double request_timeout = 60.0;   // seconds for one reply
};

class PsChannel {
 public:
  // `name`: the ps in messages, "ps:0 at 127.0.0.1:2224".
  PsChannel(const std::string& address, const std::string& name, const PsClientOptions& options);
  ~PsChannel();
  PsChannel(const PsChannel&) = delete;
  PsChannel& operator=(const PsChannel&) = delete;

  // Sends a request (header and payload in one gather write) without waiting for its reply.
  void send(PsOp op, int64_t a, const void* payload, size_t bytes);
  // Reads the reply to the oldest request sent: its payload must be `bytes`
  // long and goes to `into`. An error reply throws with the ps's message.
  PsHeader receive(PsOp expected, void* into, size_t bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class PsGroup {
 public:
  // `addresses`: every ps task's host:port, by index.
  PsGroup(Placement placement, const std::vector<std::string>& addresses, const PsClientOptions& options);
  ~PsGroup();

  const Placement& placement() const { return placement_; }
  int size() const { return static_cast<int>(channels_.size()); }

  // Asks every ps for its values (the reply is read by finish()).
  void start_pull();
  // Pushes payloads[p] to ps p (`clock`: this worker's pushes so far); each
  // reply carries the values after the push was applied (read by finish()).
  void start_push(const std::vector<std::vector<float>>& payloads, int64_t clock);
  // Reads the outstanding replies of start_pull/start_push into values[p];
  // returns the smallest version among them.
  int64_t finish(std::vector<std::vector<float>>& values);
  bool pending() const { return pending_; }

  // Values and optimizer slots of every ps (the coordinator's checkpoints).
  int64_t fetch_state(std::vector<std::vector<float>>& states);
  // Puts a whole state (from a checkpoint) on every ps and sets its version.
  void assign_state(const std::vector<std::vector<float>>& states, int64_t version);
  // Has every ps write its shards into the checkpoint's temporary directory
  // `tmp_dir` (ps_checkpoint.h; every ps resolves its name under its own
  // checkpoint directory), all at once; returns the files' digests by name.
  // IoError with the ps's reason when one cannot.
  std::map<std::string, checkpoint::FileDigest> save(const std::string& tmp_dir, int64_t step);
  // ps:0's version (updates applied) and pushes received.
  std::pair<int64_t, int64_t> stats();
  // A worker leaves normally.
  void bye();

 private:
  Placement placement_;
  std::vector<std::unique_ptr<PsChannel>> channels_;
  bool pending_ = false;
};

}  // namespace dtrain::ps
