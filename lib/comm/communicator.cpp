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
}  // namespace

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
