// LocalCommunicator and the GroupState its members share: collectives between
// threads of one process through shared memory (see local_communicator.h).
#include "comm/local_communicator.h"
#include "comm/reduction.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::comm {

namespace {

enum class Kind { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kBarrier };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllReduce: return "all_reduce";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kAllGather: return "all_gather";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kBarrier: return "barrier";
  }
  return "?";
}

// One collective call as a member makes it; all members must agree on it.
struct Call {
  Kind kind = Kind::kBarrier;
  size_t count = 0;
  int root = 0;
  bool operator==(const Call&) const = default;
};

std::string describe(const Call& c) {
  if (c.kind == Kind::kBarrier) return "barrier()";
  if (c.kind == Kind::kBroadcast) return str("broadcast(count ", c.count, ", root ", c.root, ")");
  return str(kind_name(c.kind), "(count ", c.count, ")");
}

// The buffers a member published for the current collective.
struct Slot {
  const float* in = nullptr;
  float* out = nullptr;
};

class GroupState {
 public:
  GroupState(int size, double timeout_seconds)
      : size_(size),
        timeout_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(timeout_seconds))),
        timeout_seconds_(timeout_seconds),
        present_(size, 0),
        slots_(size) {}

  int size() const { return size_; }

  // Publishes `slot` and waits until every member arrived with the same call.
  // Afterwards all slots hold this collective's buffers (and scratch() at least
  // call.count floats, for all_reduce) until the second rendezvous.
  void publish(int rank, const Call& call, Slot slot) {
    std::unique_lock lock(mutex_);
    throw_if_failed(lock, rank, call.kind);
    if (arrived_ == 0) {
      call_ = call;
    } else if (!(call == call_)) {
      fail(Failure::kMismatch, str("rank ", rank, " called ", describe(call), " while rank ", first_rank_,
                                   " called ", describe(call_)));
      throw_if_failed(lock, rank, call.kind);
    }
    if (arrived_ == 0) first_rank_ = rank;
    slots_[rank] = slot;
    arrive(lock, rank, call.kind, [&] {
      if (call.kind == Kind::kAllReduce && scratch_.size() < call.count) scratch_.resize(call.count);
    });
  }

  // The second rendezvous: every member is done reading the others' buffers.
  void finish(int rank, Kind kind) {
    std::unique_lock lock(mutex_);
    throw_if_failed(lock, rank, kind);
    arrive(lock, rank, kind, [] {});
  }

  const Slot& slot(int rank) const { return slots_[rank]; }
  float* scratch() { return scratch_.data(); }

  // A member's communicator is gone: the others can never complete a collective.
  void leave(int rank) {
    std::lock_guard lock(mutex_);
    if (!failure_) fail(Failure::kLeft, str("rank ", rank, "'s communicator was destroyed (its replica stopped)"));
  }

 private:
  enum class Failure { kTimeout, kLeft, kMismatch };

  template <class OnComplete>
  void arrive(std::unique_lock<std::mutex>& lock, int rank, Kind kind, OnComplete on_complete) {
    present_[rank] = 1;
    if (++arrived_ == size_) {
      on_complete();
      arrived_ = 0;
      std::fill(present_.begin(), present_.end(), 0);
      ++generation_;
      cv_.notify_all();
      return;
    }
    const uint64_t generation = generation_;
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (generation_ == generation) {
      throw_if_failed(lock, rank, kind);
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && generation_ == generation) {
        throw_if_failed(lock, rank, kind);
        std::vector<std::string> missing;
        for (int r = 0; r < size_; ++r)
          if (!present_[r]) missing.push_back(std::to_string(r));
        fail(Failure::kTimeout, str(missing.size() == 1 ? "rank " : "ranks ", join(missing, ", "),
                                    " did not arrive within ", timeout_seconds_, " s"));
        throw_if_failed(lock, rank, kind);
      }
    }
  }

  void fail(Failure kind, std::string message) {
    failure_ = kind;
    failure_message_ = std::move(message);
    cv_.notify_all();
  }

  void throw_if_failed(std::unique_lock<std::mutex>&, int rank, Kind kind) const {
    if (!failure_) return;
    const std::string message =
        str(kind_name(kind), " on local group (rank ", rank, " of ", size_, "): ", failure_message_);
    switch (*failure_) {
      case Failure::kTimeout: throw TimeoutError(message);
      case Failure::kLeft: throw PeerLost(message);
      case Failure::kMismatch: throw InternalError(message + " (members must make the same collective calls)");
    }
  }

  const int size_;
  const std::chrono::steady_clock::duration timeout_;
  const double timeout_seconds_;

  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;      // completed rendezvous
  int arrived_ = 0;              // members in the current rendezvous
  std::vector<char> present_;    // which members are in the current rendezvous
  Call call_;                    // the current collective (set by its first member)
  int first_rank_ = 0;
  std::optional<Failure> failure_;
  std::string failure_message_;
  std::vector<Slot> slots_;
  std::vector<float> scratch_;   // all_reduce's result, written between the rendezvous
};

// out[0..n) = sum over ranks 0..size-1, in that order, of in_r[offset..offset+n),
// divided by size for kMean. Deterministic: the same additions in the same order.
void reduce_in_rank_order(const GroupState& g, size_t offset, size_t n, float* out, ReduceOp op) {
  if (n == 0) return;
  std::vector<const float*> inputs;
  for (int r = 0; r < g.size(); ++r) inputs.push_back(g.slot(r).in + offset);
  sum_in_rank_order(inputs.data(), g.size(), n, out);
  if (op == ReduceOp::kMean) divide_by_size(out, n, g.size());
}

class LocalCommunicator final : public Communicator {
 public:
  using Communicator::all_reduce;
  using Communicator::broadcast;

  LocalCommunicator(std::shared_ptr<GroupState> group, int rank) : group_(std::move(group)), rank_(rank) {}
  ~LocalCommunicator() override { group_->leave(rank_); }

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  void all_reduce(float* data, size_t count, ReduceOp op) override {
    group_->publish(rank_, {Kind::kAllReduce, count, 0}, {data, data});
    // Each member reduces one contiguous part into the shared scratch buffer.
    const size_t n = static_cast<size_t>(size());
    const size_t part = (count + n - 1) / n;
    const size_t begin = std::min(count, part * static_cast<size_t>(rank_));
    const size_t end = std::min(count, begin + part);
    reduce_in_rank_order(*group_, begin, end - begin, group_->scratch() + begin, op);
    group_->finish(rank_, Kind::kAllReduce);
    // Nobody reads `data` any more; the scratch stays until everyone has arrived
    // at the next collective, i.e. has finished this copy.
    if (count > 0) std::memcpy(data, group_->scratch(), count * sizeof(float));
  }

  void broadcast(float* data, size_t count, int root) override {
    DT_CHECK(root >= 0 && root < size(), "broadcast root ", root, " outside 0..", size() - 1);
    group_->publish(rank_, {Kind::kBroadcast, count, root}, {data, data});
    if (rank_ != root && count > 0) std::memcpy(data, group_->slot(root).in, count * sizeof(float));
    group_->finish(rank_, Kind::kBroadcast);  // the root's buffer is read until here
  }

  void all_gather(const float* in, size_t count, float* out) override {
    group_->publish(rank_, {Kind::kAllGather, count, 0}, {in, out});
    for (int r = 0; r < size() && count > 0; ++r) {
      float* dst = out + static_cast<size_t>(r) * count;
      const float* src = group_->slot(r).in;
      if (dst != src) std::memcpy(dst, src, count * sizeof(float));
    }
    group_->finish(rank_, Kind::kAllGather);
  }

  void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) override {
    group_->publish(rank_, {Kind::kReduceScatter, count_per_rank, 0}, {in, out});
    // Into a private buffer first: `out` may alias this member's own input slice.
    result_.resize(count_per_rank);
    reduce_in_rank_order(*group_, count_per_rank * static_cast<size_t>(rank_), count_per_rank,
                         result_.data(), op);
    group_->finish(rank_, Kind::kReduceScatter);
    if (count_per_rank > 0) std::memcpy(out, result_.data(), count_per_rank * sizeof(float));
  }

  void barrier() override { group_->publish(rank_, {Kind::kBarrier, 0, 0}, {}); }

 private:
  std::shared_ptr<GroupState> group_;
  int rank_;
  std::vector<float> result_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_group(int size, double timeout_seconds) {
  if (size < 1) throw ConfigError(str("a local group needs at least 1 member, got ", size));
  if (!(timeout_seconds > 0)) throw ConfigError("a local group's timeout must be positive");
  auto group = std::make_shared<GroupState>(size, timeout_seconds);
  std::vector<std::unique_ptr<Communicator>> members;
  members.reserve(size);
  for (int r = 0; r < size; ++r) members.push_back(std::make_unique<LocalCommunicator>(group, r));
  return members;
}

}  // namespace dtrain::comm
