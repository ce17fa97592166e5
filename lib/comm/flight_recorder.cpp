// Implementation of flight_recorder.h: a ring of the last 64 entries under a
// mutex, and a forwarding Communicator that adds one entry per call and marks it
// completed, or failed with the error, when the call returns or throws.
#include "comm/flight_recorder.h"

#include <array>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <string_view>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/trace.h"

namespace dtrain::comm {
namespace {

constexpr size_t kEntries = 64;

struct Ring {
  std::mutex mutex;
  std::array<FlightEntry, kEntries> entries;
  uint64_t next = 1;
  std::map<std::string, uint64_t> group_calls;  // the last group_seq of each group
};

Ring& ring() {
  static Ring r;
  return r;
}

uint64_t start(const std::string& group, const char* op, size_t bytes, int peer, uint64_t tag) {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mutex);
  const uint64_t seq = r.next++;
  r.entries[seq % kEntries] =
      FlightEntry{seq, group, ++r.group_calls[group], op, bytes, "started", trace::now_us(), peer, tag};
  return seq;
}

void finish(uint64_t seq, const std::string& state) {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mutex);
  FlightEntry& e = r.entries[seq % kEntries];
  if (e.seq == seq) e.state = state;
}

class Recorded final : public Communicator {
 public:
  Recorded(std::unique_ptr<Communicator> inner, std::string group) : inner_(std::move(inner)), group_(std::move(group)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce(float* data, size_t count, ReduceOp op) override {
    record("all_reduce", count * sizeof(float), [&] { inner_->all_reduce(data, count, op); });
  }
  void all_reduce_bfloat16(float* data, size_t count, ReduceOp op) override {
    record("all_reduce_bf16", count * 2, [&] { inner_->all_reduce_bfloat16(data, count, op); });
  }
  void all_reduce_pieces(std::span<const Piece> pieces, ReduceOp op) override {
    size_t count = 0;
    for (const Piece& p : pieces) count += p.count;
    record("all_reduce", count * sizeof(float), [&] { inner_->all_reduce_pieces(pieces, op); });
  }
  bool reduces_pieces_in_place() const override { return inner_->reduces_pieces_in_place(); }
  std::shared_ptr<float> shared_area(size_t floats) override { return inner_->shared_area(floats); }
  void broadcast(float* data, size_t count, int root) override {
    record("broadcast", count * sizeof(float), [&] { inner_->broadcast(data, count, root); });
  }
  void all_gather(const float* in, size_t count, float* out) override {
    record("all_gather", count * sizeof(float), [&] { inner_->all_gather(in, count, out); });
  }
  void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) override {
    record("reduce_scatter", count_per_rank * static_cast<size_t>(size()) * sizeof(float),
           [&] { inner_->reduce_scatter(in, count_per_rank, out, op); });
  }
  void barrier() override {
    record("barrier", 0, [&] { inner_->barrier(); });
  }
  bool device_buffers() const override { return inner_->device_buffers(); }
  // Launched, not finished here: not recorded (the record is of host-blocking collectives).
  std::unique_ptr<DeviceWork> all_reduce_device(void* data, size_t count, ElementType type, ReduceOp op,
                                                void* stream) override {
    return inner_->all_reduce_device(data, count, type, op, stream);
  }
  std::unique_ptr<DeviceWork> send_device(const void* data, size_t count, ElementType type, int peer,
                                          void* stream) override {
    return inner_->send_device(data, count, type, peer, stream);
  }
  std::unique_ptr<DeviceWork> recv_device(void* data, size_t count, ElementType type, int peer,
                                          void* stream) override {
    return inner_->recv_device(data, count, type, peer, stream);
  }
  void send(const float* data, size_t count, int peer, uint64_t tag) override {
    record("send", count * sizeof(float), [&] { inner_->send(data, count, peer, tag); }, peer, tag);
  }
  void recv(float* data, size_t count, int peer, uint64_t tag) override {
    record("recv", count * sizeof(float), [&] { inner_->recv(data, count, peer, tag); }, peer, tag);
  }
  // The sub-group's calls are recorded too, under "<group>/split<color>".
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> sub;
    record("split", 0, [&] { sub = inner_->split(color, key); });
    if (!sub) return nullptr;
    return std::make_unique<Recorded>(std::move(sub), str(group_, "/split", color));
  }

 private:
  template <class F>
  void record(const char* op, size_t bytes, F&& call, int peer = -1, uint64_t tag = 0) {
    const uint64_t seq = start(group_, op, bytes, peer, tag);
    try {
      call();
    } catch (const std::exception& e) {
      finish(seq, str("failed: ", e.what()));
      throw;
    }
    finish(seq, "completed");
  }

  std::unique_ptr<Communicator> inner_;
  std::string group_;
};

}  // namespace

std::unique_ptr<Communicator> make_recorded(std::unique_ptr<Communicator> inner, std::string group) {
  return std::make_unique<Recorded>(std::move(inner), std::move(group));
}

std::vector<FlightEntry> flight_entries() {
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<FlightEntry> out;
  const uint64_t first = r.next > kEntries ? r.next - kEntries : 1;
  for (uint64_t seq = first; seq < r.next; ++seq)
    if (r.entries[seq % kEntries].seq == seq) out.push_back(r.entries[seq % kEntries]);
  return out;
}

std::string flight_record() {
  std::string out;
  for (const FlightEntry& e : flight_entries()) {
    const char* direction = e.op == "recv" ? " from rank " : " to rank ";
    const std::string pair = e.peer < 0 ? "" : str(direction, e.peer, " tag ", e.tag);
    out += str("#", e.seq, " ", e.group, " ", e.op, " ", e.bytes, " bytes", pair, ": ", e.state, "\n");
  }
  return out;
}

void log_flight_record(const std::string& task) {
  const std::string record = flight_record();
  if (record.empty()) return;
  const std::string heading = str(task, ": the last collectives it started (oldest first):");
  if (log::task_log_file().empty()) return log::warn(heading, "\n", record);
  const std::string log_file = log::write_detail(str("dtrain: ", heading, "\n", record));
  const size_t last = record.rfind('\n', record.size() - 2);  // (the record ends with a newline)
  const std::string last_entry = record.substr(last == std::string::npos ? 0 : last + 1);
  log::warn(log::prefix().empty() ? task + ": " : "", "the last collectives it started are in its log, ", log_file,
            " (the last: ",
            last_entry.substr(0, last_entry.size() - 1), ")");
}

}  // namespace dtrain::comm
