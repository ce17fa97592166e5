// Groups of ranks on threads of the test process for the tests that run the same
// body on both host backends: Gloo over real TCP on 127.0.0.1 (every rank joins
// through one InMemoryStore) and the in-process local group. A body owns its
// rank's communicator (it may destroy it early) and reports a problem as a
// string ("" = fine), as support/rank_threads.h's bodies do.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/gloo/gloo_communicator.h"
#include "comm/local/local_communicator.h"
#include "rendezvous/store.h"
#include "support/rank_threads.h"

namespace dtrain::test {

enum class Backend { kGloo, kLocal };

inline const char* backend_name(Backend b) { return b == Backend::kGloo ? "gloo" : "local"; }

using OwningBody = std::function<std::string(std::unique_ptr<comm::Communicator>& comm)>;
using RankBody = std::function<std::string(comm::Communicator& comm)>;

// body(comm) on n threads, one rank each; `prefix` namespaces Gloo's store keys.
inline std::vector<std::string> run_owning(Backend backend, int n, const std::string& prefix, const OwningBody& body,
                                           double timeout_seconds = 30.0) {
  if (backend == Backend::kLocal) {
    auto group = comm::make_local_group(n, timeout_seconds);
    return run_on_threads(n, [&](int r) { return body(group[static_cast<size_t>(r)]); });
  }
  rendezvous::InMemoryStore store;  // outlives every communicator, split ones too
  return run_on_threads(n, [&](int r) {
    comm::GlooOptions o;
    o.rank = r;
    o.size = n;
    o.prefix = prefix;
    o.timeout_seconds = timeout_seconds;
    std::unique_ptr<comm::Communicator> c = comm::make_gloo_communicator(store, o);
    return body(c);
  });
}

inline std::vector<std::string> run_ranks(Backend backend, int n, const std::string& prefix, const RankBody& body,
                                          double timeout_seconds = 30.0) {
  return run_owning(
      backend, n, prefix, [&](std::unique_ptr<comm::Communicator>& c) { return body(*c); }, timeout_seconds);
}

}  // namespace dtrain::test
