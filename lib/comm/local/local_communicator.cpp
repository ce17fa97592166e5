// LocalCommunicator and the GroupState its members share: collectives between
// threads of one process through shared memory, point-to-point messages through
// a mailbox per (sender, receiver, tag), and split() into new local groups (see
// local_communicator.h).
#include "comm/local/local_communicator.h"
#include "comm/reduction.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::comm {

namespace {

enum class Kind { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kBarrier, kSplit };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllReduce: return "all_reduce";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kAllGather: return "all_gather";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kBarrier: return "barrier";
    case Kind::kSplit: return "split";
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
  if (c.kind == Kind::kSplit) return "split()";
  if (c.kind == Kind::kBroadcast) return str("broadcast(count ", c.count, ", root ", c.root, ")");
  return str(kind_name(c.kind), "(count ", c.count, ")");
}

// The buffers a member published for the current collective.
struct Slot {
  const float* in = nullptr;
  float* out = nullptr;
};

class GroupState;

// A member's place in a group made by split(): the group (nullptr: none) and its rank there.
struct SplitPlace {
  std::shared_ptr<GroupState> group;
  int rank = -1;
};

class GroupState {
 public:
  GroupState(int size, double timeout_seconds)
      : size_(size),
        timeout_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(timeout_seconds))),
        timeout_seconds_(timeout_seconds),
        present_(size, 0),
        left_(size, 0),
        slots_(size),
        split_args_(size),
        split_places_(size) {}

  int size() const { return size_; }

  // Publishes `slot` and waits until every member arrived with the same call.
  // Afterwards all slots hold this collective's buffers (and scratch() at least
  // call.count floats, for all_reduce) until the second rendezvous.
  void publish(int rank, const Call& call, Slot slot) {
    std::unique_lock lock(mutex_);
    begin(lock, rank, call);
    slots_[rank] = slot;
    arrive(lock, rank, call.kind, [&] {
      if (call.kind == Kind::kAllReduce && scratch_.size() < call.count) scratch_.resize(call.count);
    });
  }

  // split(): one rendezvous; the last member to arrive makes the new groups.
  SplitPlace split(int rank, int color, int key) {
    std::unique_lock lock(mutex_);
    const Call call{Kind::kSplit, 0, 0};
    begin(lock, rank, call);
    split_args_[rank] = {color, key};
    arrive(lock, rank, call.kind, [&] { make_split_groups(); });
    // Still under the lock that arrive() re-took: no later split can have
    // completed (it needs this member), so this member's place is still there.
    return std::move(split_places_[rank]);
  }

  // Point-to-point: a copy of data[0..count) into the mailbox of (src, dst, tag).
  void post(int src, int dst, uint64_t tag, const float* data, size_t count) {
    std::lock_guard lock(mutex_);
    throw_if_failed_p2p(src, dst, tag, "send to");
    if (left_[dst])
      throw PeerLost(str(p2p_where("send to", src, dst, tag), ": rank ", dst,
                         "'s communicator was destroyed; nobody can receive the message"));
    mailbox_[{src, dst, tag}].emplace_back(data, data + count);
    cv_.notify_all();
  }

  // Point-to-point: waits for the oldest message of (src, dst, tag) and copies it
  // into data[0..count). A message sent before its sender left is still taken.
  void take(int dst, int src, uint64_t tag, float* data, size_t count) {
    std::unique_lock lock(mutex_);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    const auto key = std::make_tuple(src, dst, tag);
    for (;;) {
      auto it = mailbox_.find(key);
      if (it != mailbox_.end()) {
        std::vector<float> message = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) mailbox_.erase(it);
        if (message.size() != count)
          throw CommError(str(p2p_where("recv from", dst, src, tag), ": rank ", src, " sent ", message.size(),
                              " values, this recv expects ", count));
        if (count > 0) std::memcpy(data, message.data(), count * sizeof(float));
        return;
      }
      throw_if_failed_p2p(dst, src, tag, "recv from");
      if (left_[src])
        throw PeerLost(str(p2p_where("recv from", dst, src, tag), ": rank ", src,
                           "'s communicator was destroyed before it sent the message"));
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !mailbox_.count(key))
        throw TimeoutError(str(p2p_where("recv from", dst, src, tag), ": rank ", src,
                               " sent nothing with this tag within ", timeout_seconds_, " s"));
    }
  }

  // The second rendezvous: every member is done reading the others' buffers.
  void finish(int rank, Kind kind) {
    std::unique_lock lock(mutex_);
    throw_if_failed(lock, rank, kind);
    arrive(lock, rank, kind, [] {});
  }

  const Slot& slot(int rank) const { return slots_[rank]; }
  float* scratch() { return scratch_.data(); }

  // A member's communicator is gone: the others can never complete a collective
  // (point-to-point with the other members goes on).
  void leave(int rank) {
    std::lock_guard lock(mutex_);
    left_[rank] = 1;
    if (!failure_) fail(Failure::kLeft, str("rank ", rank, "'s communicator was destroyed (its replica stopped)"));
    cv_.notify_all();
  }

 private:
  enum class Failure { kTimeout, kLeft, kMismatch };

  // The first member of a collective sets it; the others must make the same call.
  void begin(std::unique_lock<std::mutex>& lock, int rank, const Call& call) {
    throw_if_failed(lock, rank, call.kind);
    if (arrived_ == 0) {
      call_ = call;
      first_rank_ = rank;
    } else if (!(call == call_)) {
      fail(Failure::kMismatch, str("rank ", rank, " called ", describe(call), " while rank ", first_rank_,
                                   " called ", describe(call_)));
      throw_if_failed(lock, rank, call.kind);
    }
  }

  // Members with the same color >= 0, ordered by (key, rank), become one new group.
  void make_split_groups() {
    std::map<int, std::vector<std::pair<int, int>>> by_color;  // color -> (key, rank)
    for (int r = 0; r < size_; ++r)
      if (split_args_[r].first >= 0) by_color[split_args_[r].first].push_back({split_args_[r].second, r});
    for (auto& place : split_places_) place = SplitPlace{};
    for (auto& [color, members] : by_color) {
      std::sort(members.begin(), members.end());
      auto group = std::make_shared<GroupState>(static_cast<int>(members.size()), timeout_seconds_);
      for (size_t i = 0; i < members.size(); ++i)
        split_places_[members[i].second] = SplitPlace{group, static_cast<int>(i)};
    }
  }

  std::string p2p_where(const char* what, int rank, int peer, uint64_t tag) const {
    return str(what, " rank ", peer, " with tag ", tag, " on local group (rank ", rank, " of ", size_, ")");
  }

  // A failed collective (a deadline, a mismatch) ends point-to-point too; a member
  // that left ends only the messages with it.
  void throw_if_failed_p2p(int rank, int peer, uint64_t tag, const char* what) const {
    if (!failure_ || *failure_ == Failure::kLeft) return;
    const std::string message = str(p2p_where(what, rank, peer, tag), ": the group failed: ", failure_message_);
    if (*failure_ == Failure::kTimeout) throw TimeoutError(message);
    throw InternalError(message);
  }

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
  std::vector<char> left_;       // which members' communicators were destroyed
  Call call_;                    // the current collective (set by its first member)
  int first_rank_ = 0;
  std::optional<Failure> failure_;
  std::string failure_message_;
  std::vector<Slot> slots_;
  std::vector<float> scratch_;   // all_reduce's result, written between the rendezvous
  std::vector<std::pair<int, int>> split_args_;  // each member's (color, key)
  std::vector<SplitPlace> split_places_;         // each member's new group
  // Point-to-point messages not yet received, oldest first, by (src, dst, tag).
  std::map<std::tuple<int, int, uint64_t>, std::deque<std::vector<float>>> mailbox_;
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
    check_usable();
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
    check_usable();
    group_->publish(rank_, {Kind::kBroadcast, count, root}, {data, data});
    if (rank_ != root && count > 0) std::memcpy(data, group_->slot(root).in, count * sizeof(float));
    group_->finish(rank_, Kind::kBroadcast);  // the root's buffer is read until here
  }

  void all_gather(const float* in, size_t count, float* out) override {
    check_usable();
    group_->publish(rank_, {Kind::kAllGather, count, 0}, {in, out});
    for (int r = 0; r < size() && count > 0; ++r) {
      float* dst = out + static_cast<size_t>(r) * count;
      const float* src = group_->slot(r).in;
      if (dst != src) std::memcpy(dst, src, count * sizeof(float));
    }
    group_->finish(rank_, Kind::kAllGather);
  }

  void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) override {
    check_usable();
    group_->publish(rank_, {Kind::kReduceScatter, count_per_rank, 0}, {in, out});
    // Into a private buffer first: `out` may alias this member's own input slice.
    result_.resize(count_per_rank);
    reduce_in_rank_order(*group_, count_per_rank * static_cast<size_t>(rank_), count_per_rank,
                         result_.data(), op);
    group_->finish(rank_, Kind::kReduceScatter);
    if (count_per_rank > 0) std::memcpy(out, result_.data(), count_per_rank * sizeof(float));
  }

  void barrier() override {
    check_usable();
    group_->publish(rank_, {Kind::kBarrier, 0, 0}, {});
  }

  void send(const float* data, size_t count, int peer, uint64_t tag) override {
    check_usable();
    check_point_to_point("send", peer, tag, name());
    point_to_point([&] { group_->post(rank_, peer, tag, data, count); });
  }

  void recv(float* data, size_t count, int peer, uint64_t tag) override {
    check_usable();
    check_point_to_point("recv", peer, tag, name());
    point_to_point([&] { group_->take(rank_, peer, tag, data, count); });
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    check_usable();
    SplitPlace place = group_->split(rank_, color, key);
    if (!place.group) return nullptr;
    return std::make_unique<LocalCommunicator>(std::move(place.group), place.rank);
  }

 private:
  std::string name() const { return str("local group (rank ", rank_, " of ", size(), ")"); }

  // A failed send/recv leaves this member unusable, as a failed collective does;
  // the other members go on until they need it.
  template <class F>
  void point_to_point(F&& f) {
    try {
      f();
    } catch (const Error&) {
      std::lock_guard<std::mutex> lock(failed_mutex_);
      if (!failed_) failed_ = std::current_exception();
      throw;
    }
  }

  // Every call after a failed send/recv throws that error again.
  void check_usable() const {
    std::exception_ptr failed;
    {
      std::lock_guard<std::mutex> lock(failed_mutex_);
      failed = failed_;
    }
    if (failed) std::rethrow_exception(failed);
  }

  std::shared_ptr<GroupState> group_;
  int rank_;
  std::vector<float> result_;
  // send() and recv() may run on other threads than the collectives.
  mutable std::mutex failed_mutex_;
  std::exception_ptr failed_;
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
