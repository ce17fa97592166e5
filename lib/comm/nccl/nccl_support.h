// The parts of the NCCL communicator that need no GPU, compiled in every build
// and unit-tested on any machine: handing NCCL's unique id from rank 0 to the
// other ranks through the job's Store, the polling loop every NCCL wait runs
// (done? backend error? lost peer? deadline?), the failure it reports, and the
// text of an NCCL error. nccl_communicator.cpp puts the GPU calls behind them.
//
// kNcclBuilt says whether this build has the NCCL communicator (a CUDA build
// with libnccl found); without it, nothing here touches NCCL.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "comm/communicator.h"

#ifndef DTRAIN_HAVE_NCCL
#define DTRAIN_HAVE_NCCL 0
#endif

namespace dtrain::rendezvous {
class Store;
}

namespace dtrain::comm {

inline constexpr bool kNcclBuilt = DTRAIN_HAVE_NCCL != 0;

// Why a collective (or the communicator's set-up) did not finish: which error
// type it becomes, and the message.
struct CommFailure {
  enum class Kind { kBackend, kPeerLost, kTimeout };
  Kind kind = Kind::kBackend;
  std::string message;
  // Throws it: CommError, PeerLost or TimeoutError.
  [[noreturn]] void raise() const;
};

// What one wait looks at each time round its loop. `finished` and `backend_error`
// are required; `peer_lost` may be empty (no heartbeats to ask).
struct CollectivePoll {
  std::function<bool()> finished;                         // the GPU work is done (cudaEventQuery)
  std::function<std::optional<std::string>()> backend_error;  // the backend's own error (ncclCommGetAsyncError)
  PeerLostCheck peer_lost;
};

// Polls until `finished` (nullopt), the backend reports an error (kBackend), a
// peer is lost (kPeerLost, its message first, then `what`) or `timeout_seconds`
// pass (kTimeout naming `what` and the limit). Never blocks longer than the
// deadline plus one poll. The caller aborts the communicator on a failure.
std::optional<CommFailure> poll_until_finished(const std::string& what, const CollectivePoll& poll,
                                               double timeout_seconds);

// NCCL's unique id from rank 0 to every rank through `store`: rank 0 calls
// make_id() and sets `key` to it (hex, so any store carries it); the other ranks
// wait for the key up to timeout_seconds (TimeoutError naming the key and rank 0
// otherwise) and read it. Returns the id's bytes on every rank. `who` names the
// communicator in messages.
std::string share_unique_id(rendezvous::Store& store, const std::string& key, int rank, double timeout_seconds,
                            const std::function<std::string()>& make_id, const std::string& who);

// An NCCL error as dtrain prints it: "NCCL error in <call> on <where>: <error
// string> (ncclResult_t <code>)" and, when NCCL left one, ": <last error>".
std::string nccl_error_message(const std::string& call, int code, const std::string& error_string,
                               const std::string& last_error, const std::string& where);

}  // namespace dtrain::comm
