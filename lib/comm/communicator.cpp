// The Tensor conveniences of Communicator: host tensors go to the pointer-based
// collective directly; device tensors through a host copy (the host-memory
// engines, Gloo and the local group, cannot read device memory).
#include "comm/communicator.h"

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::comm {

namespace {
// Runs `collective` on t's values in host memory, copying them back if t is on a device.
template <class F>
void on_host(Tensor& t, const char* what, F collective) {
  DT_CHECK(t.defined(), what, " of an undefined tensor");
  if (t.device().is_cpu()) return collective(t.data());
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
  void broadcast(float* data, size_t count, int root) override { other_.broadcast(data, count, root); }
  void all_gather(const float* in, size_t count, float* out) override { other_.all_gather(in, count, out); }
  void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) override {
    other_.reduce_scatter(in, count_per_rank, out, op);
  }
  void barrier() override { other_.barrier(); }

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

void Communicator::all_reduce(Tensor& t, ReduceOp op) {
  on_host(t, "all_reduce", [&](float* p) { all_reduce(p, static_cast<size_t>(t.numel()), op); });
}

void Communicator::broadcast(Tensor& t, int root) {
  on_host(t, "broadcast", [&](float* p) { broadcast(p, static_cast<size_t>(t.numel()), root); });
}

}  // namespace dtrain::comm
