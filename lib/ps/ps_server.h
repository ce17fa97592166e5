// PsServer: a ps task's service. It holds the task's ShardStore and answers the
// workers' pulls and pushes and the coordinator's fetch/assign/stats over TCP
// (Asio, one I/O thread, so the variables need no locks), and writes its shards
// into a checkpoint when the coordinator asks (ps_checkpoint.h).
//
// Every connection first passes the job's HMAC handshake (rendezvous/auth.h)
// within a deadline; frames are bounded by what each op carries for this ps; a
// connection that fails either is dropped and logged, and the job goes on.
//
// Update modes (strategy.mode):
//   async  every push is applied when it arrives (TF's ParameterServerStrategy);
//   sync   one push per live worker makes a round; the round's mean is applied
//          once and then every pusher gets the new values (lost workers stop
//          counting; a worker that comes back counts from the next round);
//   stale  pushes apply at once, but the reply to a worker more than
//          max_staleness pushes ahead of the slowest live worker waits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ps/shard_store.h"
#include "rendezvous/auth.h"

namespace dtrain::ps {

enum class UpdateMode { kAsync, kSync, kStale };

struct PsServerOptions {
  rendezvous::Credentials credentials;
  std::string task = "ps:0";
  UpdateMode mode = UpdateMode::kAsync;
  int64_t max_staleness = 0;
  std::vector<std::string> workers;  // the training workers' task names (sync and stale count them)
  double handshake_timeout = 5.0;
  // The job's checkpoint directory (checkpoint.dir, else output.dir/checkpoints),
  // the same path for every task; "" when the job has none (a save is refused).
  // A save writes only into a ".tmp-ckpt-*" directory right under it.
  std::string checkpoint_dir;
  // Called on the I/O thread after every applied update with the new version.
  std::function<void(int64_t version)> on_update;
};

struct PsServerState;

class PsServer {
 public:
  // Serves on an inherited listening socket (from `dtrain launch`), or binds
  // host:port when listen_fd < 0 (port 0: any free port).
  PsServer(ShardStore& shards, PsServerOptions options, int listen_fd, const std::string& host = "0.0.0.0",
           int port = 0);
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  int port() const;
  int64_t version() const;               // updates applied
  int rejected_connections() const;      // dropped for the handshake or the protocol

 private:
  std::shared_ptr<PsServerState> state_;
};

}  // namespace dtrain::ps
