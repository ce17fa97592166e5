// The Gloo communicator: collectives between the tasks of a job over TCP, for
// host (CPU) buffers.
//
// Gloo is the engine (ring all-reduce, all-gather, tree broadcast, dissemination
// barrier, all-to-all for reduce-scatter, point-to-point on unbound buffers);
// dtrain's own rendezvous store is how the ranks find each other: each rank
// publishes its TCP addresses under `prefix` in the chief's store and reads its
// peers'. A rank connects only the peers its collectives need (rank +- 2^i, about
// 2 log2 N of them) and the others when first used (gloo_pairs.h says which and
// why), unless GlooOptions::full_mesh asks for Gloo's full mesh. The store is
// used while the communicator is constructed, when a pair is connected later, and by split(), which connects the new
// group through it under "<prefix>split<k>/<color>/" (k counts this
// communicator's splits) over the same TCP device. Every collective runs under the Gloo context's
// deadline (timeout_seconds); a peer that died is dtrain::PeerLost, a deadline
// that passed is dtrain::TimeoutError, both naming the communicator and the rank
// (send/recv: also the peer rank and the tag). After either error the
// communicator is unusable (Gloo's pairs are left in an unknown state); every
// later call throws the same error again. send() returns once the message is
// queued; a background thread (started by the first send) waits, with the
// deadline, until the peer received it, and the destructor waits for the
// messages still queued (at most the deadline; at once when the communicator
// already failed).
//
// Gloo and Asio headers stay out of this header.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace dtrain::rendezvous {
class Store;
}

namespace dtrain::comm {

// Which all-reduce Gloo runs: its own choice (strategy.communication "auto"; Gloo
// 2022 picks its ring), or its ring asked for by name ("ring").
enum class AllReduceAlgorithm { kGlooDefault, kRing };

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // Namespace of this communicator's keys in the job's store, e.g. "comm/grads/".
  // Every communicator of a job needs its own prefix (keys are never reused).
  std::string prefix = "comm/default/";
  // The address Gloo's TCP device binds to and publishes to the other ranks: this
  // task's host as the others reach it ("127.0.0.1" for a local simulation).
  std::string hostname = "127.0.0.1";
  // Deadline of connecting and of every collective, in seconds.
  double timeout_seconds = 60.0;
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kGlooDefault;
  // Connect every pair at once (Gloo's full mesh: N - 1 connections per rank).
  // Off, a rank connects only the ranks its collectives need (gloo_pairs.h:
  // rank +- 2^i, about 2 log2 N) and the others when first used.
  bool full_mesh = false;
};

// What this process's Gloo communicators connected so far: TCP pairs (benchmarks
// and tests; the connecting time is the caller's to measure).
struct GlooConnectStats {
  int64_t pairs = 0;
};
GlooConnectStats gloo_connect_stats();

// Joins the communicator: binds a Gloo TCP device on options.hostname, exchanges
// addresses with the other options.size - 1 ranks through `store` and connects to
// each of them. `store` must outlive the communicator and every communicator
// split from it (split() connects through it; the job's store, owned by the
// task's ClusterSession, outlives the communicators the task makes), and split()
// must be called from a thread that may use the store. Collective: every rank calls it with the same prefix and size.
// Throws TimeoutError if some rank does not join within timeout_seconds (naming
// which), ConfigError for a hostname Gloo cannot bind, PeerLost if a connection
// fails. As a side effect, SIGPIPE is ignored process-wide if it was at its
// default (Gloo writes with writev, which would otherwise kill the process when a
// peer has gone; ignored, the write fails and becomes PeerLost).
std::unique_ptr<Communicator> make_gloo_communicator(rendezvous::Store& store,
                                                     const GlooOptions& options);

}  // namespace dtrain::comm
