// One rank of a Gloo group of `size` that meets through an in-process store: the
// communicator of a task that the unit tests run on a thread (rank_threads.h).
#pragma once

#include <memory>

#include "comm/gloo/gloo_communicator.h"
#include "rendezvous/store.h"

namespace dtrain::test {

inline std::unique_ptr<comm::Communicator> gloo_rank(rendezvous::Store& store, int rank, int size,
                                                     double timeout_seconds = 30.0) {
  comm::GlooOptions o;
  o.rank = rank;
  o.size = size;
  o.timeout_seconds = timeout_seconds;
  return comm::make_gloo_communicator(store, o);
}

}  // namespace dtrain::test
