// GlooCommunicator: the Communicator on Gloo's TCP transport, and StoreAdapter,
// which lets Gloo's rendezvous run over a dtrain rendezvous::Store.
//
// Gloo version notes (Debian's libgloo 0.5, a 2022 snapshot):
//  - the modern API (gloo/allreduce.h etc.) has all_reduce, broadcast, all_gather
//    and barrier; reduce-scatter exists only as the legacy, per-size
//    ReduceScatterHalvingDoubling with int counts, so reduce_scatter here is an
//    all-reduce into a scratch buffer plus a slice (twice the traffic of a true
//    reduce-scatter, same result);
//  - a timeout is a gloo::IoException "Timed out waiting ...", a peer that closed
//    its socket a gloo::IoException "Connection closed by peer ...";
//  - all-reduce takes a custom element-wise reduction (setReduceFunction) on
//    elements of any size: all_reduce_bfloat16 sends 2-byte bfloat16 bits and
//    adds each pair in float32, rounding the sum back to bfloat16 (Gloo's ring
//    forwards partial sums in the buffer's type, so they are rounded per hop);
//  - every operation gets its own tag (all ranks count the same sequence), as
//    PyTorch's ProcessGroupGloo does, so messages of consecutive operations can
//    never be matched to the wrong one.
#include "comm/gloo_communicator.h"
#include "comm/reduction.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <optional>

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

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::string seconds_text(double s) { return str(s, " s"); }

// gloo::rendezvous::Store over a dtrain rendezvous::Store (the job's StoreClient, or
// an InMemoryStore in tests). Keys are put under the
// communicator's prefix; values are binary (Gloo's addresses) and travel as
// std::string. Gloo's get() must block until the key exists: wait, then get.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(rendezvous::Store& store, std::string prefix, double timeout_seconds,
               std::string who)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout_seconds), who_(std::move(who)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }

  std::vector<char> get(const std::string& key) override {
    wait_for({key}, timeout_);
    const std::optional<std::string> value = store_.get(prefix_ + key);
    DT_CHECK(value.has_value(), "the key '", prefix_ + key, "' vanished from the store");
    return std::vector<char>(value->begin(), value->end());
  }

  void wait(const std::vector<std::string>& keys) override { wait_for(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const Millis& timeout) override {
    wait_for(keys, timeout.count() > 0 ? timeout.count() / 1000.0 : timeout_);
  }

 private:
  void wait_for(const std::vector<std::string>& keys, double timeout_seconds) {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    if (store_.wait(full, timeout_seconds)) return;
    // Say who is missing. Gloo's keys are the ranks' numbers.
    std::vector<std::string> missing;
    for (size_t i = 0; i < keys.size(); ++i)
      if (!store_.get(full[i]).has_value()) missing.push_back(keys[i]);
    if (missing.empty()) return;  // arrived just after the deadline
    const bool ranks = std::all_of(missing.begin(), missing.end(), all_digits);
    throw TimeoutError(str(who_, ": ", ranks ? (missing.size() == 1 ? "rank " : "ranks ") : "keys ",
                           join(missing, ", "), " did not join within ", seconds_text(timeout_seconds),
                           " (store keys under '", prefix_, "')"));
  }

  rendezvous::Store& store_;
  std::string prefix_;
  double timeout_;
  std::string who_;
};

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


class GlooCommunicator final : public Communicator {
 public:
  using Communicator::all_reduce;
  using Communicator::broadcast;

  GlooCommunicator(rendezvous::Store& store, const GlooOptions& o)
      : options_(o),
        name_(str("communicator '", o.prefix, "' (rank ", o.rank, " of ", o.size, ")")),
        timeout_(Millis(static_cast<int64_t>(o.timeout_seconds * 1000.0))) {
    if (o.size < 1) throw ConfigError(str(name_, ": the group size must be at least 1"));
    if (o.rank < 0 || o.rank >= o.size)
      throw ConfigError(str(name_, ": rank ", o.rank, " is outside 0..", o.size - 1));
    if (o.prefix.empty()) throw ConfigError("a Gloo communicator needs a non-empty key prefix");
    if (!(o.timeout_seconds > 0)) throw ConfigError(str(name_, ": timeout_seconds must be positive"));
    if (o.size == 1) return;  // a group of one needs no transport
    ignore_sigpipe_once();
    connect(store);
  }

  ~GlooCommunicator() override {
    // Gloo's destructors close the sockets; peers still in a collective see
    // "connection closed" and fail with PeerLost.
    context_.reset();
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
    guarded("all_gather", [&] {
      gloo::AllgatherOptions opts(context_);
      // Gloo only reads the input; its buffer API takes non-const pointers.
      opts.setInput(const_cast<float*>(in), count);
      opts.setOutput(out, count * static_cast<size_t>(options_.size));
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) override {
    if (count_per_rank == 0) return;
    check_usable("reduce_scatter");
    const size_t total = count_per_rank * static_cast<size_t>(options_.size);
    const size_t begin = count_per_rank * static_cast<size_t>(options_.rank);
    if (options_.size > 1) {
      // No modern reduce-scatter in this Gloo: all-reduce a copy, keep our slice.
      scratch_.assign(in, in + total);
      gloo_all_reduce("reduce_scatter", scratch_.data(), total, &sum_floats);
      std::memcpy(out, scratch_.data() + begin, count_per_rank * sizeof(float));
    } else if (in != out) {
      std::memmove(out, in, count_per_rank * sizeof(float));
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

 private:
  void connect(rendezvous::Store& store) {
    Stopwatch watch;
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
    auto context = std::make_shared<gloo::rendezvous::Context>(options_.rank, options_.size);
    context->setTimeout(timeout_);
    StoreAdapter adapter(store, options_.prefix, options_.timeout_seconds, name_);
    guarded("connecting", [&] { context->connectFullMesh(adapter, device_); });
    context_ = std::move(context);
    log::debug(name_, ": connected to ", options_.size - 1, " peers through Gloo on ",
               options_.hostname, " in ", watch.seconds(), " s");
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

  void check_usable(const char* what) {
    if (!broken_) return;
    const std::string message =
        str(what, " on ", name_, ": the communicator failed earlier and cannot be used: ", broken_->message);
    if (broken_->timed_out) throw TimeoutError(message);
    if (broken_->refused) throw CommError(message);
    throw PeerLost(message);
  }

  // Runs a Gloo call; turns Gloo's exceptions into PeerLost / TimeoutError /
  // CommError.
  template <class F>
  void guarded(const char* what, F&& f) {
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
      broken_ = Broken{false, str(what, " on ", name_, ": gloo refused the call: ", e.what()), true};
      throw CommError(broken_->message);
    }
  }

  [[noreturn]] void fail(const char* what, const std::string& detail) {
    const std::string l = lower(detail);
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
    broken_ = Broken{timed_out, message};
    if (timed_out) throw TimeoutError(message);
    throw PeerLost(message);
  }

  struct Broken {
    bool timed_out;
    std::string message;
    bool refused = false;  // CommError rather than a lost peer
  };

  GlooOptions options_;
  std::string name_;
  Millis timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;
  std::vector<float> scratch_;  // reduce_scatter's all-reduce buffer
  std::vector<bf16_bits> wire_;  // all_reduce_bfloat16's buffer
  std::optional<Broken> broken_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(rendezvous::Store& store,
                                                     const GlooOptions& options) {
  return std::make_unique<GlooCommunicator>(store, options);
}

}  // namespace dtrain::comm
