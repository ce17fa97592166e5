// Implementation of shard_pieces.h.
#include "strategy/shard_pieces.h"

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "kernels/ops.h"
#include "optim/clipping.h"

namespace dtrain::strategy {

std::vector<StatePiece> pieces_of(const std::vector<nn::Param*>& tensors, const std::vector<PieceOf>& of,
                                  const std::vector<nn::Param*>& params, bool optimizer) {
  std::vector<StatePiece> out;
  DT_CHECK(of.empty() ? tensors.empty() : tensors.size() % of.size() == 0, "tensors that are not one per piece");
  for (size_t j = 0; j < tensors.size(); ++j) {
    const PieceOf& at = of[j % of.size()];
    out.push_back({tensors[j]->name, params[at.param]->value.shape(), at.offset, &tensors[j]->value, optimizer});
  }
  return out;
}

void load_pieces(const std::vector<nn::Param*>& tensors, const std::vector<PieceOf>& of,
                 const std::vector<nn::Param*>& params, const Strategy::TensorLookup& lookup, const char* what) {
  DT_CHECK(of.empty() ? tensors.empty() : tensors.size() % of.size() == 0, "tensors that are not one per piece");
  for (size_t j = 0; j < tensors.size(); ++j) {
    nn::Param& piece = *tensors[j];
    const PieceOf& at = of[j % of.size()];
    const Shape& whole = params[at.param]->value.shape();
    const Tensor* t = lookup(piece.name);
    if (!t)
      throw ConfigError(str("the checkpoint's ", what, " has no tensor '", piece.name,
                            "': it was written for another model or optimizer"));
    if (t->shape() == whole) piece.value.copy_from(t->flat_slice(at.offset, piece.value.numel()));
    else if (t->shape() == piece.value.shape()) piece.value.copy_from(*t);
    else
      throw ConfigError(str("the checkpoint's ", what, " tensor '", piece.name, "' has shape ", shape_str(t->shape()),
                            " but the model needs ", shape_str(whole)));
  }
}

void clip_pieces_by_norm(const std::vector<nn::Param*>& pieces, const std::vector<PieceOf>& of, size_t params,
                         comm::Communicator& workers, double clipnorm, double global_clipnorm) {
  if (clipnorm <= 0.0 && global_clipnorm <= 0.0) return;
  DT_CHECK_EQ(pieces.size(), of.size());
  std::vector<float> per_param(params, 0.0f);
  if (!pieces.empty()) {
    const Device device = pieces.front()->grad.device();
    Tensor squares({static_cast<int64_t>(pieces.size())}, device);
    for (size_t i = 0; i < pieces.size(); ++i) {
      Tensor sum = squares.flat_slice(static_cast<int64_t>(i), 1);
      kernels::sum_of_squares(pieces[i]->grad, sum);
    }
    std::vector<float> host(pieces.size());
    squares.copy_to_host(host.data());  // waits for the sums on a GPU
    for (size_t i = 0; i < host.size(); ++i) per_param[of[i].param] += host[i];
  }
  if (workers.size() > 1) workers.all_reduce(per_param.data(), per_param.size(), comm::ReduceOp::kSum);
  if (pieces.empty()) return;
  Tensor param_squares({static_cast<int64_t>(params)}, pieces.front()->grad.device());
  param_squares.copy_from_host(per_param.data());
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (clipnorm > 0.0)
      kernels::clip_by_norm(pieces[i]->grad, param_squares.flat_slice(static_cast<int64_t>(of[i].param), 1),
                            static_cast<float>(clipnorm));
    else
      kernels::clip_by_norm(pieces[i]->grad, param_squares, static_cast<float>(global_clipnorm));
  }
}

void clip_split_by_norm(const std::vector<nn::Param*>& params, const std::vector<bool>& counted,
                        comm::Communicator* parts, comm::Communicator* stages, double clipnorm,
                        double global_clipnorm) {
  if ((clipnorm <= 0.0 && global_clipnorm <= 0.0) || params.empty()) {
    // (a stage without trainable params still takes part in the stages' sum)
    if (global_clipnorm > 0.0 && stages && stages->size() > 1) {
      float none = 0.0f;
      stages->all_reduce(&none, 1, comm::ReduceOp::kSum);
    }
    return;
  }
  DT_CHECK_EQ(params.size(), counted.size());
  const bool split = parts && parts->size() > 1;
  if (!split && (clipnorm > 0.0 || !stages || stages->size() <= 1)) {
    // Nothing to sum over other tasks: the optimizers' own clipping, the norms on the device.
    optim::OptimizerSpec spec;
    spec.clipnorm = clipnorm;
    spec.global_clipnorm = global_clipnorm;
    optim::GradientClipper(spec).clip(params);
    return;
  }
  // Each param's sum of squares, this task's share, then summed over the parts.
  const Device device = params.front()->grad.device();
  const auto n = static_cast<int64_t>(params.size());
  Tensor sums({n}, device);
  for (int64_t i = 0; i < n; ++i) {
    Tensor sum = sums.flat_slice(i, 1);
    if (counted[static_cast<size_t>(i)]) kernels::sum_of_squares(params[static_cast<size_t>(i)]->grad, sum);
    else sum.zero();
  }
  std::vector<float> squares(params.size());
  sums.copy_to_host(squares.data());  // waits for the sums on a GPU
  if (split) parts->all_reduce(squares.data(), squares.size(), comm::ReduceOp::kSum);
  if (global_clipnorm > 0.0) {
    double sum = 0.0;  // (in param order, in double, as GradientClipper's kernel sums)
    for (float v : squares) sum += v;
    double total = sum;
    if (stages && stages->size() > 1) {
      float mine = static_cast<float>(sum);
      stages->all_reduce(&mine, 1, comm::ReduceOp::kSum);
      total = mine;
    }
    Tensor norm({1}, device);
    const float value = static_cast<float>(total);
    norm.copy_from_host(&value);
    for (nn::Param* p : params) kernels::clip_by_norm(p->grad, norm, static_cast<float>(global_clipnorm));
    return;
  }
  sums.copy_from_host(squares.data());
  for (int64_t i = 0; i < n; ++i)
    kernels::clip_by_norm(params[static_cast<size_t>(i)]->grad, sums.flat_slice(i, 1), static_cast<float>(clipnorm));
}

}  // namespace dtrain::strategy
