// Implementation of nccl_support.h: the NCCL communicator's GPU-free logic
// (unique-id exchange, the polling wait, failures and error texts).
#include "comm/nccl/nccl_support.h"

#include <thread>

#include "comm/bench_allreduce.h"

#include "core/error.h"
#include "core/strings.h"
#include "rendezvous/store.h"

namespace dtrain::comm {
namespace {

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string text;
  text.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    text.push_back(digits[b >> 4]);
    text.push_back(digits[b & 15]);
  }
  return text;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The bytes of `text`; CommError naming `key` when it is not hex (not an id dtrain wrote).
std::string from_hex(const std::string& text, const std::string& key) {
  std::string bytes;
  bool ok = text.size() % 2 == 0;
  for (size_t i = 0; ok && i < text.size(); i += 2) {
    const int hi = hex_digit(text[i]), lo = hex_digit(text[i + 1]);
    ok = hi >= 0 && lo >= 0;
    bytes.push_back(static_cast<char>(hi * 16 + lo));
  }
  if (!ok) throw CommError(str("the store key '", key, "' does not hold an NCCL unique id written by dtrain"));
  return bytes;
}

}  // namespace

void CommFailure::raise() const {
  switch (kind) {
    case Kind::kPeerLost: throw PeerLost(message);
    case Kind::kTimeout: throw TimeoutError(message);
    case Kind::kBackend: break;
  }
  throw CommError(message);
}

std::optional<CommFailure> poll_until_finished(const std::string& what, const CollectivePoll& poll,
                                               double timeout_seconds) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(timeout_seconds));
  for (int round = 0;; ++round) {
    if (poll.finished()) return std::nullopt;
    if (std::optional<std::string> error = poll.backend_error())
      return CommFailure{CommFailure::Kind::kBackend, str(what, " failed: ", *error)};
    if (poll.peer_lost)
      if (std::optional<std::string> lost = poll.peer_lost())
        return CommFailure{CommFailure::Kind::kPeerLost, str(*lost, " (", what, " was aborted)")};
    if (Clock::now() >= deadline)
      return CommFailure{CommFailure::Kind::kTimeout,
                         str(what, " did not finish within ", timeout_seconds,
                             " s (a peer stalled or never joined); the communicator was aborted")};
    // Small collectives finish in microseconds: yield first, then sleep briefly
    // so a long wait does not take a core from the threads feeding the GPU.
    if (round < 200)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(round < 2000 ? 20 : 500));
  }
}

std::string share_unique_id(rendezvous::Store& store, const std::string& key, int rank, double timeout_seconds,
                            const std::function<std::string()>& make_id, const std::string& who) {
  if (rank == 0) {
    const std::string id = make_id();
    store.set(key, to_hex(id));
    return id;
  }
  if (!store.wait({key}, timeout_seconds))
    throw TimeoutError(str(who, ": rank ", rank, " waited ", timeout_seconds, " s for rank 0 to publish NCCL's unique id "
                           "(store key '", key, "'); rank 0 did not start the communicator"));
  const std::optional<std::string> value = store.get(key);
  if (!value) throw CommError(str(who, ": the store key '", key, "' vanished after it was set"));
  return from_hex(*value, key);
}

std::string nccl_error_message(const std::string& call, int code, const std::string& error_string,
                               const std::string& last_error, const std::string& where) {
  std::string message = str("NCCL error in ", call, " on ", where, ": ", error_string, " (ncclResult_t ", code, ")");
  if (!last_error.empty()) message += str(": ", last_error);
  return message;
}

#if !DTRAIN_HAVE_NCCL
// A build without NCCL: `dtrain bench allreduce --device gpu` says so.
std::vector<AllReduceResult> bench_nccl_all_reduce(const std::vector<int>&, const std::vector<size_t>&, int, int,
                                                   double) {
  throw ConfigError("bench allreduce --device gpu: this build of dtrain has no NCCL (it was built without the CUDA "
                    "backend or without libnccl); rebuild with -DDTRAIN_CUDA=ON on a machine with the CUDA toolkit "
                    "and NCCL");
}
#endif

}  // namespace dtrain::comm
