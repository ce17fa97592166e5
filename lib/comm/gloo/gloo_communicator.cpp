// GlooCommunicator: the Communicator on Gloo's TCP transport, and StoreAdapter,
// which lets Gloo's rendezvous run over a dtrain rendezvous::Store.
//
// Gloo version notes (Debian's libgloo 0.5, a 2022 snapshot):
//  - the modern API (gloo/allreduce.h etc.) has all_reduce, broadcast, all_gather,
//    all-to-all and barrier, and no reduce-scatter: the legacy
//    ReduceScatterHalvingDoubling (gloo/reduce_scatter.h) gave a wrong sum about
//    one run in six of a 4-task ZeRO job (ThreadSanitizer reports it receiving
//    into a buffer it is sending from). So reduce_scatter is Gloo's all-to-all
//    (rank r receives every rank's slice r: the (N - 1) / N of the data a ring
//    reduce-scatter moves) and a sum of the N slices in rank order, the same
//    result on every run;
//  - point-to-point uses unbound buffers (send(rank, slot), waitSend/waitRecv
//    with a timeout). Gloo's TCP send is a rendezvous (the data goes once the
//    receiver posted its recv) and a received message longer than the posted
//    buffer fails an enforce in Gloo's event-loop thread, which ends the
//    process. So each message is two: an 8-byte header with the count, then the
//    payload, received only once the counts agree; and send() is eager (a copy,
//    waited for by a background thread), so both sides may send first. Slots: a
//    collective's is Slot::build(prefix 0x01..0x08, tag) = prefix << 56 | tag
//    << 24 (+ up to 0xff), below 2^60; the legacy algorithms take
//    context->nextSlot(), an int counter from 0; point-to-point slots have bit
//    63 set (2^63 | tag << 1 | header 0 / payload 1), so they never meet theirs;
//  - a context can be built over an existing device (PyTorch's process groups
//    share one): split() connects its new group over this communicator's device;
//  - a timeout is a gloo::IoException "Timed out waiting ...", a peer that closed
//    its socket a gloo::IoException "Connection closed by peer ...";
//  - all-reduce takes a custom element-wise reduction (setReduceFunction) on
//    elements of any size: all_reduce_bfloat16 sends 2-byte bfloat16 bits and
//    adds each pair in float32, rounding the sum back to bfloat16 (Gloo's ring
//    forwards partial sums in the buffer's type, so they are rounded per hop);
//  - every operation gets its own tag (all ranks count the same sequence), as
//    PyTorch's ProcessGroupGloo does, so messages of consecutive operations can
//    never be matched to the wrong one.
#include "comm/gloo/gloo_communicator.h"
#include "comm/gloo/gloo_pairs.h"
#include "comm/reduction.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/alltoall.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "rendezvous/store.h"
#include "tensor/bfloat16.h"

namespace dtrain::comm {

namespace {

// This process's thread ids (/proc/self/task).
std::set<long> thread_ids() {
  std::set<long> ids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const std::string name = e.path().filename().string();
    if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit)) ids.insert(std::stol(name));
  }
  return ids;
}

// Gloo's TCP device runs an event-loop thread. When a message arrives while a
// user thread holds that pair's lock (it is sending), the loop cannot take the
// lock and polls again at once (level-triggered epoll): a spin. On cores that
// several tasks share, the spinning loop threads take the CPU from the very
// threads that hold the locks, and a 0.94 MB all-reduce of the MLP's gradients
// took 2.2 ms in training against ~0.5 ms alone. So the threads the device
// started run at the lowest priority (nice 19): a spinning loop yields to any
// other work, and the loop still gets a core at once when the task's own threads
// wait for its messages, which is when it has work to do.
void lower_priority_of_new_threads(const std::set<long>& before) {
  for (const long id : thread_ids())
    if (!before.count(id) && setpriority(PRIO_PROCESS, static_cast<id_t>(id), 19) != 0)
      log::warn("comm: could not lower the priority of Gloo's event-loop thread ", id, ": ", std::strerror(errno));
}

using Millis = std::chrono::milliseconds;


// Gloo's tcp transport writes with writev(2), which raises SIGPIPE on a socket
// whose peer is gone. Ignored, the write fails with EPIPE and Gloo throws.
void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      ::sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

std::string seconds_text(double s) { return str(s, " s"); }

// Element-wise float sum for Gloo: out = a + b (out may alias a or b).
void sum_floats(void* out, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// Element-wise bfloat16 sum for Gloo: each pair added in float32, the sum rounded
// to bfloat16 (Gloo passes partial sums between ranks in the buffer's type).
void sum_bfloat16(void* out, const void* a, const void* b, size_t n) {
  bf16_bits* o = static_cast<bf16_bits*>(out);
  const bf16_bits* x = static_cast<const bf16_bits*>(a);
  const bf16_bits* y = static_cast<const bf16_bits*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(y[i]));
}


// Point-to-point slots (see the notes at the top): bit 63 set, then the tag, then
// header (0) or payload (1). Tags are at most Communicator::kMaxTag (2^62 - 1).
constexpr uint64_t kPointToPointSlot = uint64_t{1} << 63;
uint64_t header_slot(uint64_t tag) { return kPointToPointSlot | tag << 1; }
uint64_t payload_slot(uint64_t tag) { return kPointToPointSlot | tag << 1 | 1; }

using Clock = std::chrono::steady_clock;

// The time left until `deadline`, at least 1 ms (Gloo reads a negative timeout
// as "the context's default").
Millis time_left(Clock::time_point deadline) {
  return std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline - Clock::now()));
}

// A message send() queued: its copy and Gloo's buffers, kept until the peer has
// received it.
struct Outgoing {
  int peer = 0;
  uint64_t tag = 0;
  uint64_t count = 0;  // the header's value
  std::vector<float> data;
  std::unique_ptr<gloo::transport::UnboundBuffer> header;
  std::unique_ptr<gloo::transport::UnboundBuffer> payload;  // none for count 0
  Clock::time_point deadline;
};

class GlooCommunicator final : public Communicator {
 public:
  using Communicator::all_reduce;
  using Communicator::broadcast;

  // `device`: the TCP device to connect over (split() passes its parent's);
  // nullptr makes one.
  GlooCommunicator(rendezvous::Store& store, const GlooOptions& o,
                   std::shared_ptr<gloo::transport::Device> device = nullptr)
      : options_(o),
        name_(str("communicator '", o.prefix, "' (rank ", o.rank, " of ", o.size, ")")),
        timeout_(Millis(static_cast<int64_t>(o.timeout_seconds * 1000.0))),
        store_(&store) {
    if (o.size < 1) throw ConfigError(str(name_, ": the group size must be at least 1"));
    if (o.rank < 0 || o.rank >= o.size)
      throw ConfigError(str(name_, ": rank ", o.rank, " is outside 0..", o.size - 1));
    if (o.prefix.empty()) throw ConfigError("a Gloo communicator needs a non-empty key prefix");
    if (!(o.timeout_seconds > 0)) throw ConfigError(str(name_, ": timeout_seconds must be positive"));
    if (o.size == 1) return;  // a group of one needs no transport
    ignore_sigpipe_once();
    device_ = std::move(device);
    connect(store);
  }

  ~GlooCommunicator() override {
    finish_sends();
    // Gloo's destructors close the sockets; peers still in a collective see
    // "connection closed" and fail with PeerLost.
    context_.reset();
    pairs_.reset();
    device_.reset();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  void all_reduce(float* data, size_t count, ReduceOp op) override {
    if (count == 0) return;
    check_usable("all_reduce");
    if (options_.size > 1) gloo_all_reduce("all_reduce", data, count, &sum_floats);
    if (op == ReduceOp::kMean) divide_by_size(data, count, options_.size);
  }

  // Half the bytes: the values travel as bfloat16 bits, summed by sum_bfloat16.
  void all_reduce_bfloat16(float* data, size_t count, ReduceOp op) override {
    if (count == 0) return;
    check_usable("all_reduce_bfloat16");
    if (options_.size == 1) {
      round_to_bfloat16(data, count);
    } else {
      wire_.resize(count);
      for (size_t i = 0; i < count; ++i) wire_[i] = f32_to_bf16(data[i]);
      gloo_all_reduce("all_reduce_bfloat16", wire_.data(), count, &sum_bfloat16);
      for (size_t i = 0; i < count; ++i) data[i] = bf16_to_f32(wire_[i]);
    }
    if (op == ReduceOp::kMean) divide_by_size(data, count, options_.size);
  }

  void broadcast(float* data, size_t count, int root) override {
    DT_CHECK(root >= 0 && root < options_.size, "broadcast root ", root, " outside 0..",
             options_.size - 1, " on ", name_);
    if (count == 0) return;
    check_usable("broadcast");
    if (options_.size == 1) return;
    guarded("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data, count);  // the root sends from it, the others receive into it
      opts.setRoot(root);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  void all_gather(const float* in, size_t count, float* out) override {
    if (count == 0) return;
    check_usable("all_gather");
    if (options_.size == 1) {
      if (in != out) std::memmove(out, in, count * sizeof(float));
      return;
    }
    gloo_all_gather("all_gather", in, count, out);
  }

  void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) override {
    if (count_per_rank == 0) return;
    check_usable("reduce_scatter");
    const size_t total = count_per_rank * static_cast<size_t>(options_.size);
    if (options_.size == 1) {
      if (in != out) std::memmove(out, in, count_per_rank * sizeof(float));
    } else {
      // Every rank's slice r goes to rank r (Gloo's all-to-all), which adds the N
      // slices it received in rank order.
      scratch_.resize(total);
      connect_every_rank("reduce_scatter (connecting every rank for Gloo's all-to-all)");
      guarded("reduce_scatter", [&] {
        gloo::AlltoallOptions opts(context_);
        opts.setInput(const_cast<float*>(in), total);  // Gloo only reads it
        opts.setOutput(scratch_.data(), total);
        opts.setTag(next_tag());
        opts.setTimeout(timeout_);
        gloo::alltoall(opts);
      });
      std::memcpy(out, scratch_.data(), count_per_rank * sizeof(float));
      for (int r = 1; r < options_.size; ++r) {
        const float* slice = scratch_.data() + count_per_rank * static_cast<size_t>(r);
        for (size_t i = 0; i < count_per_rank; ++i) out[i] += slice[i];
      }
    }
    if (op == ReduceOp::kMean) divide_by_size(out, count_per_rank, options_.size);
  }

  void barrier() override {
    check_usable("barrier");
    if (options_.size == 1) return;
    guarded("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

  // Queues the header and the payload (a copy) for `peer`; Gloo sends them once
  // the peer posts its recvs. The send thread waits for them and frees them.
  void send(const float* data, size_t count, int peer, uint64_t tag) override {
    check_usable("send");
    check_point_to_point("send", peer, tag, name_);
    auto message = std::make_unique<Outgoing>();
    message->peer = peer;
    message->tag = tag;
    message->count = count;
    message->data.assign(data, data + count);
    message->deadline = Clock::now() + timeout_;
    const std::string what = str("send to rank ", peer, " with tag ", tag);
    connect_pair(what, peer);
    guarded(what, [&] {
      message->header = context_->createUnboundBuffer(&message->count, sizeof message->count);
      message->header->send(peer, header_slot(tag));
      if (count > 0) {
        message->payload = context_->createUnboundBuffer(message->data.data(), count * sizeof(float));
        message->payload->send(peer, payload_slot(tag));
      }
    });
    std::lock_guard<std::mutex> lock(mutex_);
    if (!sends_thread_.joinable()) sends_thread_ = std::thread([this] { complete_sends(); });
    sends_.push_back(std::move(message));
    sends_changed_.notify_all();
  }

  // The header first: a payload is only posted for once the counts agree (a
  // longer message than the posted buffer would end the process in Gloo).
  void recv(float* data, size_t count, int peer, uint64_t tag) override {
    check_usable("recv");
    check_point_to_point("recv", peer, tag, name_);
    const Clock::time_point deadline = Clock::now() + timeout_;
    const std::string what = str("recv from rank ", peer, " with tag ", tag);
    uint64_t sent = 0;
    connect_pair(what, peer);
    guarded(what, [&] {
      auto header = context_->createUnboundBuffer(&sent, sizeof sent);
      header->recv(peer, header_slot(tag));
      header->waitRecv(time_left(deadline));
    });
    if (sent != count) {
      const std::string message =
          str(what, " on ", name_, ": rank ", peer, " sent ", sent, " values, this recv expects ", count);
      set_broken(Broken{false, message, true});
      throw CommError(message);
    }
    if (count == 0) return;
    guarded(what, [&] {
      auto payload = context_->createUnboundBuffer(data, count * sizeof(float));
      payload->recv(peer, payload_slot(tag));
      payload->waitRecv(time_left(deadline));
    });
  }

  // (color, key) of every rank through an all-gather, then a new context among
  // the ranks of this one's color, over the same device.
  std::unique_ptr<Communicator> split(int color, int key) override {
    check_usable("split");
    const uint64_t k = splits_++;
    const size_t n = static_cast<size_t>(options_.size);
    std::vector<int64_t> mine{color, key}, all(2 * n);
    if (options_.size == 1) {
      all = mine;
    } else {
      gloo_all_gather(str("split(color ", color, ", key ", key, ")"), mine.data(), 2, all.data());
    }
    if (color < 0) return nullptr;
    std::vector<std::pair<int64_t, int>> members;  // (key, rank here) of this color
    for (size_t r = 0; r < n; ++r)
      if (all[2 * r] == color) members.push_back({all[2 * r + 1], static_cast<int>(r)});
    std::sort(members.begin(), members.end());
    GlooOptions o = options_;
    o.size = static_cast<int>(members.size());
    o.rank = static_cast<int>(std::find(members.begin(), members.end(), std::make_pair(int64_t{key}, options_.rank)) -
                              members.begin());
    o.prefix = str(options_.prefix, "split", k, "/", color, "/");
    return std::make_unique<GlooCommunicator>(*store_, o, device_);
  }

 private:
  void connect(rendezvous::Store& store) {
    Stopwatch watch;
    if (!device_) {
      gloo::transport::tcp::attr attr;
      attr.hostname = options_.hostname;
      const std::set<long> before = thread_ids();
      try {
        device_ = gloo::transport::tcp::CreateDevice(attr);
        lower_priority_of_new_threads(before);
      } catch (const gloo::EnforceNotMet& e) {
        throw ConfigError(str(name_, ": cannot bind Gloo's TCP transport to host '", options_.hostname,
                              "': ", e.what()));
      } catch (const gloo::Exception& e) {
        throw ConfigError(str(name_, ": cannot bind Gloo's TCP transport to host '", options_.hostname,
                              "': ", e.what()));
      }
    }
    GlooPairs::Options pairs{options_.rank, options_.size, options_.prefix, options_.timeout_seconds, name_};
    pairs_ = std::make_unique<GlooPairs>(store, device_, pairs);
    const std::vector<int> peers = options_.full_mesh ? all_other_ranks(options_.rank, options_.size)
                                                      : gloo_neighbours(options_.rank, options_.size);
    guarded("connecting", [&] { pairs_->connect_round(peers); });
    full_mesh_ = static_cast<int>(peers.size()) == options_.size - 1;
    context_ = pairs_->context();
    log::debug(name_, ": connected to ", peers.size(), " of ", options_.size - 1, " peers through Gloo on ",
               options_.hostname, " in ", watch.seconds(), " s");
  }

  // The pair with `peer` for a send or recv: connected on first use unless it is
  // a neighbour (gloo_pairs.h).
  void connect_pair(const std::string& what, int peer) {
    if (pairs_->connected(peer)) return;
    try {
      guarded(what, [&] { pairs_->connect_one(peer); });
    } catch (const TimeoutError& e) {
      const std::string message = str(what, ": rank ", peer, " is not a neighbour, so their pair is connected by "
                                      "the first send or recv between them, and: ", e.what());
      set_broken(Broken{true, message});
      throw TimeoutError(message);
    }
  }

  // Gloo's all-to-all needs every pair: the first one connects the rest of the
  // mesh (every rank makes the same calls, so every rank does it at the same one).
  void connect_every_rank(const std::string& what) {
    if (full_mesh_) return;
    guarded(what, [&] { pairs_->connect_all(); });
    full_mesh_ = true;
  }

  uint32_t next_tag() { return tag_++; }

  // Gloo's all-reduce of data[0..count) in place (the output is also the input),
  // elements of T added by `sum`.
  template <class T>
  void gloo_all_reduce(const char* what, T* data, size_t count, gloo::AllreduceOptions::Func sum) {
    guarded(what, [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setReduceFunction(std::move(sum));
      if (options_.algorithm == AllReduceAlgorithm::kRing) opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
  }

  // Gloo's all-gather: out[r*count .. (r+1)*count) = rank r's in[0..count).
  template <class T>
  void gloo_all_gather(const std::string& what, const T* in, size_t count, T* out) {
    guarded(what, [&] {
      gloo::AllgatherOptions opts(context_);
      // Gloo only reads the input; its buffer API takes non-const pointers.
      opts.setInput(const_cast<T*>(in), count);
      opts.setOutput(out, count * static_cast<size_t>(options_.size));
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }


  // The send thread: waits, oldest first, until each queued message was received
  // (or its deadline passed), then frees it. A failure is kept for the
  // communicator's next call and ends the thread (the context is broken: the
  // queued messages can no longer go).
  void complete_sends() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      sends_changed_.wait(lock, [&] { return stop_sends_ || !sends_.empty(); });
      if (sends_.empty() || abandon_sends_) return;
      Outgoing& m = *sends_.front();  // only this thread removes messages
      lock.unlock();
      std::optional<std::string> error;
      bool aborted = false;
      try {
        aborted = !m.header->waitSend(time_left(m.deadline));
        if (!aborted && m.payload) aborted = !m.payload->waitSend(time_left(m.deadline));
      } catch (const gloo::Exception& e) {
        error = e.what();
      } catch (const gloo::EnforceNotMet& e) {
        error = e.what();
      }
      lock.lock();
      if (aborted) return;  // the destructor gives the messages up
      if (error) {
        const std::string l = lower(*error);
        const bool timed_out = l.find("timed out") != std::string::npos || l.find("timeout") != std::string::npos;
        const std::string what = str("send to rank ", m.peer, " with tag ", m.tag);
        unsent_ = timed_out ? str(what, " on ", name_, ": rank ", m.peer, " did not receive the message within ",
                                  seconds_text(options_.timeout_seconds), ": gloo: ", *error)
                            : str(what, " on ", name_, ": lost the connection to rank ", m.peer,
                                  " (its task died or became unreachable): gloo: ", *error);
        if (!broken_) broken_ = Broken{timed_out, *unsent_};
        return;
      }
      sends_.pop_front();
    }
  }

  // Ends the send thread: after the queued messages were received (each within
  // its deadline), or at once when the communicator failed.
  void finish_sends() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!sends_thread_.joinable()) return;
    stop_sends_ = true;
    if (broken_) {
      abandon_sends_ = true;
      if (!sends_.empty()) {
        sends_.front()->header->abortWaitSend();
        if (sends_.front()->payload) sends_.front()->payload->abortWaitSend();
      }
    }
    sends_changed_.notify_all();
    lock.unlock();
    sends_thread_.join();
    if (unsent_) log::warn(name_, ": closing with a message not received: ", *unsent_);
    sends_.clear();
  }

  void check_usable(const char* what) {
    std::optional<Broken> broken;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      broken = broken_;
    }
    if (!broken) return;
    const std::string message =
        str(what, " on ", name_, ": the communicator failed earlier and cannot be used: ", broken->message);
    if (broken->timed_out) throw TimeoutError(message);
    if (broken->refused) throw CommError(message);
    throw PeerLost(message);
  }

  // Runs a Gloo call; turns Gloo's exceptions into PeerLost / TimeoutError /
  // CommError.
  template <class F>
  void guarded(const std::string& what, F&& f) {
    try {
      f();
    } catch (const Error&) {
      throw;  // already a dtrain error (from the store adapter)
    } catch (const gloo::IoException& e) {
      fail(what, e.what());
    } catch (const gloo::Exception& e) {
      fail(what, e.what());
    } catch (const gloo::EnforceNotMet& e) {
      // A broken precondition (ranks that disagree on sizes, a refused call) is
      // CommError; Gloo also reports some transport failures this way.
      const std::string l = lower(e.what());
      for (const char* word : {"timed out", "timeout", "connection", "closed", "reset", "read error", "write error"})
        if (l.find(word) != std::string::npos) fail(what, e.what());
      const std::string message = str(what, " on ", name_, ": gloo refused the call: ", e.what());
      set_broken(Broken{false, message, true});
      throw CommError(message);
    }
  }

  [[noreturn]] void fail(const std::string& what, const std::string& detail) {
    const std::string l = lower(detail);
    // Out of sockets on this machine, not a peer's fault: every Gloo pair listens
    // on a port of its own until connected.
    for (const char* word : {"address already in use", "too many open files", "cannot assign requested address"})
      if (l.find(word) != std::string::npos) {
        const std::string message =
            str(what, " on ", name_, ": could not open a socket for a Gloo pair: gloo: ", detail,
                " (this machine is out of ports or descriptors for this many connections: see "
                "net.ipv4.ip_local_port_range and the open-file limit, ulimit -n)");
        set_broken(Broken{false, message, true});
        throw RuntimeError(message);
      }
    const bool timed_out = l.find("timed out") != std::string::npos || l.find("timeout") != std::string::npos;
    std::string message;
    if (timed_out) {
      message = str(what, " on ", name_, ": no progress within the deadline of ",
                    seconds_text(options_.timeout_seconds),
                    " (a peer is stalled, gone, or not making the same call): gloo: ", detail);
    } else {
      message = str(what, " on ", name_,
                    ": lost the connection to a peer (its task died or became unreachable): gloo: ", detail);
    }
    set_broken(Broken{timed_out, message});
    if (timed_out) throw TimeoutError(message);
    throw PeerLost(message);
  }

  struct Broken {
    bool timed_out;
    std::string message;
    bool refused = false;  // CommError rather than a lost peer
  };

  // The first failure is the one every later call reports.
  void set_broken(Broken b) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_) broken_ = std::move(b);
  }

  GlooOptions options_;
  std::string name_;
  Millis timeout_;
  rendezvous::Store* store_;  // outlives this communicator (make_gloo_communicator's contract)
  std::shared_ptr<gloo::transport::Device> device_;  // shared with the communicators split from this one
  std::unique_ptr<GlooPairs> pairs_;  // the context's pairs, connected as they are needed
  std::shared_ptr<gloo::Context> context_;
  bool full_mesh_ = false;            // every pair connected (GlooOptions::full_mesh, or a reduce_scatter)
  uint32_t tag_ = 0;
  uint64_t splits_ = 0;  // split() calls so far: part of the new groups' prefixes
  std::vector<float> scratch_;  // reduce_scatter: the slices every rank sent this one
  std::vector<bf16_bits> wire_;  // all_reduce_bfloat16's buffer

  // Guards broken_ and the send queue: send() and recv() may run on other
  // threads than the collectives, and the send thread records failures too.
  std::mutex mutex_;
  std::optional<Broken> broken_;
  // send(): the queue of messages not yet received and the thread that waits for them.
  std::condition_variable sends_changed_;
  std::deque<std::unique_ptr<Outgoing>> sends_;
  bool stop_sends_ = false;     // finish_sends() was called
  bool abandon_sends_ = false;  // ... on a failed communicator: give the queue up
  std::optional<std::string> unsent_;  // why the send thread gave up, for the destructor's warning
  std::thread sends_thread_;
};

}  // namespace

GlooConnectStats gloo_connect_stats() { return {gloo_pairs_connected()}; }

std::unique_ptr<Communicator> make_gloo_communicator(rendezvous::Store& store,
                                                     const GlooOptions& options) {
  return std::make_unique<GlooCommunicator>(store, options);
}

}  // namespace dtrain::comm
