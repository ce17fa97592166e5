// A flight recorder for collectives, as PyTorch's NCCL one: the last 64
// collectives this process started on a recorded communicator, each with its
// sequence number, group, op, bytes and state (started, completed or failed and
// why). When a peer is lost or a collective times out, each task writes them to
// its log, so the logs of all tasks together say which collective each was in.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace dtrain::comm {

// A Communicator that records every call of `inner` (which it owns) under `group`.
std::unique_ptr<Communicator> make_recorded(std::unique_ptr<Communicator> inner, std::string group);

// The recorded collectives, oldest first, one per line ("" when none):
//   "#17 workers all_reduce 940168 bytes: completed" (bytes as sent: a
// bfloat16 all-reduce, op all_reduce_bf16, counts 2 per value);
//   "#18 stages send 4096 bytes to rank 1 tag 2050: completed" (point-to-point).
// A communicator split from a recorded one is recorded as "<group>/split<color>".
std::string flight_record();

}  // namespace dtrain::comm
