// The Tensor conveniences of Communicator: host tensors go to the pointer-based
// collective directly; device tensors through a host copy for the host-memory
// engines (Gloo, the local group), directly for a device engine (NCCL). Also the
// defaults of send/recv/split (CommError) and of all_reduce_pieces (through one
// buffer), padded_count, and borrow().
#include "comm/communicator.h"
#include "comm/reduction.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "tensor/bfloat16.h"

namespace dtrain::comm {

namespace {
// Runs `collective` on t's values where the engine reads them: in place when t lives
// where the engine's buffers do, else (a GPU tensor, a host engine) on a host copy.
template <class F>
void on_host(Tensor& t, bool device_buffers, const char* what, F collective) {
  DT_CHECK(t.defined(), what, " of an undefined tensor");
  if (t.device().is_cpu() != device_buffers) return collective(t.data());
  DT_CHECK(!device_buffers, what, " of a host tensor on a communicator of device buffers");
  Tensor host = t.to_host();
  collective(host.data());
  t.copy_from(host);
}
class Borrowed : public Communicator {
 public:
  explicit Borrowed(Communicator& other) : other_(other) {}
  int rank() const override { return other_.rank(); }
  int size() const override { return other_.size(); }
  void all_reduce(float* data, size_t count, ReduceOp op) override { other_.all_reduce(data, count, op); }
  void all_reduce_bfloat16(float* data, size_t count, ReduceOp op) override {
    other_.all_reduce_bfloat16(data, count, op);
  }
  void all_reduce_pieces(std::span<const Piece> pieces, ReduceOp op) override {
    other_.all_reduce_pieces(pieces, op);
  }
  bool reduces_pieces_in_place() const override { return other_.reduces_pieces_in_place(); }
  std::shared_ptr<float> shared_area(size_t floats) override { return other_.shared_area(floats); }
  void broadcast(float* data, size_t count, int root) override { other_.broadcast(data, count, root); }
  void all_gather(const float* in, size_t count, float* out) override { other_.all_gather(in, count, out); }
  void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) override {
    other_.reduce_scatter(in, count_per_rank, out, op);
  }
  void barrier() override { other_.barrier(); }
  bool device_buffers() const override { return other_.device_buffers(); }
  std::unique_ptr<DeviceWork> all_reduce_device(void* data, size_t count, ElementType type, ReduceOp op,
                                                void* stream) override {
    return other_.all_reduce_device(data, count, type, op, stream);
  }
  std::unique_ptr<DeviceWork> send_device(const void* data, size_t count, ElementType type, int peer,
                                          void* stream) override {
    return other_.send_device(data, count, type, peer, stream);
  }
  std::unique_ptr<DeviceWork> recv_device(void* data, size_t count, ElementType type, int peer,
                                          void* stream) override {
    return other_.recv_device(data, count, type, peer, stream);
  }
  void send(const float* data, size_t count, int peer, uint64_t tag) override { other_.send(data, count, peer, tag); }
  void recv(float* data, size_t count, int peer, uint64_t tag) override { other_.recv(data, count, peer, tag); }
  std::unique_ptr<Communicator> split(int color, int key) override { return other_.split(color, key); }

 private:
  Communicator& other_;
};

}  // namespace

std::unique_ptr<Communicator> borrow(Communicator& other) { return std::make_unique<Borrowed>(other); }

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
  }
  return "?";
}

const char* element_type_name(ElementType type) { return type == ElementType::kBfloat16 ? "bfloat16" : "float"; }
size_t element_size(ElementType type) { return type == ElementType::kBfloat16 ? 2 : 4; }

std::unique_ptr<DeviceWork> Communicator::all_reduce_device(void*, size_t, ElementType, ReduceOp, void*) {
  DT_CHECK(false, "all_reduce_device on a communicator of host buffers (ask device_buffers() first)");
  return nullptr;
}

std::unique_ptr<DeviceWork> Communicator::send_device(const void*, size_t, ElementType, int, void*) {
  DT_CHECK(false, "send_device on a communicator of host buffers (ask device_buffers() first)");
  return nullptr;
}

std::unique_ptr<DeviceWork> Communicator::recv_device(void*, size_t, ElementType, int, void*) {
  DT_CHECK(false, "recv_device on a communicator of host buffers (ask device_buffers() first)");
  return nullptr;
}

size_t padded_count(size_t count, int size) {
  DT_CHECK(size >= 1, "padded_count over a group of ", size, " ranks");
  const size_t n = static_cast<size_t>(size);
  return (count + n - 1) / n * n;
}

void Communicator::send(const float*, size_t, int peer, uint64_t tag) {
  throw CommError(str("send to rank ", peer, " with tag ", tag, ": this communicator (rank ", rank(), " of ", size(),
                      ") has no point-to-point messages"));
}

void Communicator::recv(float*, size_t, int peer, uint64_t tag) {
  throw CommError(str("recv from rank ", peer, " with tag ", tag, ": this communicator (rank ", rank(), " of ",
                      size(), ") has no point-to-point messages"));
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  throw CommError(str("split(color ", color, ", key ", key, "): this communicator (rank ", rank(), " of ", size(),
                      ") cannot be split into sub-groups"));
}

void Communicator::check_point_to_point(const char* what, int peer, uint64_t tag, const std::string& who) const {
  if (peer < 0 || peer >= size())
    throw CommError(str(what, " on ", who, ": rank ", peer, " is outside 0..", size() - 1, " (tag ", tag, ")"));
  if (peer == rank())
    throw CommError(str(what, " on ", who, ": rank ", peer, " is this rank; a rank does not message itself (tag ",
                        tag, ")"));
  if (tag > kMaxTag)
    throw CommError(str(what, " with rank ", peer, " on ", who, ": tag ", tag, " is above the largest, ", kMaxTag));
}

void round_to_bfloat16(float* data, size_t count) {
  for (size_t i = 0; i < count; ++i) data[i] = bf16_to_f32(f32_to_bf16(data[i]));
}

void Communicator::all_reduce_bfloat16(float* data, size_t count, ReduceOp op) {
  round_to_bfloat16(data, count);
  all_reduce(data, count, ReduceOp::kSum);
  round_to_bfloat16(data, count);
  if (op == ReduceOp::kMean) divide_by_size(data, count, size());
}

void Communicator::all_reduce_pieces(std::span<const Piece> pieces, ReduceOp op) {
  size_t total = 0;
  for (const Piece& p : pieces) total += p.count;
  std::vector<float> buffer(total);
  float* at = buffer.data();
  for (const Piece& p : pieces) at = std::copy_n(p.data, p.count, at);
  all_reduce(buffer.data(), total, op);
  const float* from = buffer.data();
  for (const Piece& p : pieces) {
    std::copy_n(from, p.count, p.data);
    from += p.count;
  }
}

void Communicator::all_reduce(Tensor& t, ReduceOp op) {
  on_host(t, device_buffers(), "all_reduce", [&](float* p) { all_reduce(p, static_cast<size_t>(t.numel()), op); });
}

void Communicator::broadcast(Tensor& t, int root) {
  on_host(t, device_buffers(), "broadcast", [&](float* p) { broadcast(p, static_cast<size_t>(t.numel()), root); });
}

}  // namespace dtrain::comm
