// A flight recorder for collectives, as PyTorch's NCCL one: the last 64
// collectives this process started on a recorded communicator, each with its
// sequence number, group, op, bytes and state (started, completed or failed and
// why). When a peer is lost or a collective times out, each task writes them to
// its log, so the logs of all tasks together say which collective each was in.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace dtrain::comm {

// One recorded collective. `group_seq` counts the calls of one group (1, 2, ...):
// tasks that run the same collectives in the same order have the same numbers
// for the same call, which is how a hang's diagnosis lines them up.
struct FlightEntry {
  uint64_t seq = 0;        // this process's count of recorded calls
  std::string group;       // "workers", "workers/split1", "stages"
  uint64_t group_seq = 0;
  std::string op;          // "all_reduce", "send", ...
  size_t bytes = 0;
  std::string state;       // "started", "completed", "failed: ..."
  int64_t started_us = 0;  // wall clock (trace::now_us)
  int peer = -1;           // send/recv: the other rank
  uint64_t tag = 0;
};

// The recorded collectives, oldest first.
std::vector<FlightEntry> flight_entries();

// A Communicator that records every call of `inner` (which it owns) under `group`.
std::unique_ptr<Communicator> make_recorded(std::unique_ptr<Communicator> inner, std::string group);

// The recorded collectives, oldest first, one per line ("" when none):
//   "#17 workers all_reduce 940168 bytes: completed" (bytes as sent: a
// bfloat16 all-reduce, op all_reduce_bf16, counts 2 per value);
//   "#18 stages send 4096 bytes to rank 1 tag 2050: completed" (point-to-point).
// A communicator split from a recorded one is recorded as "<group>/split<color>".
std::string flight_record();
// Says the record of `task` ("worker:1") when something went wrong: under
// `dtrain launch` the whole record goes to the task's log file alone and one
// warning line names that file and the last entry; otherwise the warning
// carries the whole record. Nothing when nothing was recorded.
void log_flight_record(const std::string& task);

}  // namespace dtrain::comm
