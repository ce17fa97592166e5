// GlooPairs: which ranks of a Gloo group a rank connects to, and the connecting,
// over dtrain's store (in place of Gloo's connectFullMesh). Internal to comm:
// gloo_communicator.cpp is its one user.
//
// Why not the full mesh: Gloo's connectFullMesh makes N - 1 TCP connections per
// rank (N(N-1)/2 in all, each a socket on both sides) and publishes, per rank,
// one store value holding an address for every other rank, which every rank
// reads: N - 1 reads of N - 1 addresses each, so the store moves N^3 addresses
// (at N = 4,096: about 2 GB per rank). The collectives dtrain runs on Gloo need
// far fewer peers:
//  - the ring all-reduce and all-gather: rank - 1 and rank + 1;
//  - the binomial-tree broadcast from root t: the ranks whose distance from this
//    one (relative to t) differs in one bit, i.e. rank +- 2^i;
//  - the dissemination barrier: rank +- 2^i;
// so gloo_neighbours() (every rank +- 2^i mod N, about 2 log2 N ranks: 24 of
// 4,095 at N = 4,096) is what a communicator connects when it is made. The rest
// come only when used: Gloo's all-to-all (dtrain's reduce_scatter) needs every
// rank, so its first call connects the rest of the mesh (a collective round, as
// the first); a send() or recv() to a rank that is not a neighbour connects that
// one pair, both ranks taking part (the sender waits, within the deadline, until
// the receiver makes its first call to it: two ranks whose first messages to each
// other wait on a third in a cycle would time out, which no strategy does).
//
// A round: each rank makes a pair (a listening socket) per peer, publishes one
// store value with their addresses ("<prefix>pairs<k>/<rank>"), waits for its
// peers' values, reads them in one get_many and connects the pairs in increasing
// peer order. Both sides of a TCP pair block until it is connected; increasing
// peer order is one order of edges that every rank follows, so no rank waits on
// one that waits on it. Store cost per rank and round: one set, one wait, one
// get_many of its peers' values (O(log^2 N) bytes for the neighbours).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace dtrain::rendezvous {
class Store;
}

namespace dtrain::comm {

// Every (rank +- 2^i) mod size for 2^i < size, without rank itself, in increasing order.
std::vector<int> gloo_neighbours(int rank, int size);

// The ranks other than `rank`, in increasing order: the full mesh.
std::vector<int> all_other_ranks(int rank, int size);

class GlooPairs {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    std::string prefix;    // of the store keys, e.g. "comm/grads/"
    double timeout_seconds = 60.0;
    std::string name;      // of the communicator, for messages
  };

  // A Gloo context over `device` with no pair yet. `store` outlives this.
  GlooPairs(rendezvous::Store& store, std::shared_ptr<gloo::transport::Device> device, Options options);
  ~GlooPairs();
  GlooPairs(const GlooPairs&) = delete;
  GlooPairs& operator=(const GlooPairs&) = delete;

  // The context that collectives run on (its pairs are the ones connected here).
  std::shared_ptr<gloo::Context> context() const;

  // Collective among this rank and `peers` (each of which calls it with this rank
  // among its peers): connects a pair to every one of them not yet connected.
  // TimeoutError naming the ranks whose addresses did not come in time.
  void connect_round(const std::vector<int>& peers);
  // Collective over every rank: the rest of the full mesh.
  void connect_all() { connect_round(all_other_ranks(options_.rank, options_.size)); }
  // Connects the pair with `peer` unless there is one; `peer` makes the same call
  // for this rank (its first send or recv to this one).
  void connect_one(int peer);

  bool connected(int peer) const;
  int pairs() const;                 // connected so far

 private:
  // TimeoutError "<name>: rank(s) <ranks> <did_not> within ..." for the keys still absent.
  void wait_for(const std::vector<std::string>& keys, const std::vector<int>& ranks, const char* did_not);

  rendezvous::Store& store_;
  Options options_;
  std::shared_ptr<gloo::Context> context_;
  mutable std::mutex mutex_;  // one connecting call at a time (send and recv may be on two threads)
  std::vector<bool> connected_;
  int rounds_ = 0;
};

// Pairs that this process's GlooPairs connected so far (gloo_connect_stats()).
int64_t gloo_pairs_connected();

}  // namespace dtrain::comm
