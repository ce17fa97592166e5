// The Tensor conveniences of Communicator: checks that the tensor is a CPU tensor,
// then calls the pointer-based collective.
#include "comm/communicator.h"

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::comm {

namespace {
float* host_data(Tensor& t, const char* what) {
  DT_CHECK(t.defined(), what, " of an undefined tensor");
  if (!t.device().is_cpu())
    throw ConfigError(str(what, " of a tensor on ", t.device().str(),
                          ": this communicator handles host (cpu) tensors only"));
  return t.data();
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
  all_reduce(host_data(t, "all_reduce"), static_cast<size_t>(t.numel()), op);
}

void Communicator::broadcast(Tensor& t, int root) {
  broadcast(host_data(t, "broadcast"), static_cast<size_t>(t.numel()), root);
}

}  // namespace dtrain::comm
