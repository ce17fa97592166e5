// Implementation of shard_pieces.h.
#include "strategy/sync/shard_pieces.h"

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "kernels/ops.h"

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

namespace {

// Each piece's gradient sum of squares on the host (0 where `counted` says no;
// empty `counted`: every piece counts), summed on the gradients' device.
std::vector<float> piece_squares(const std::vector<nn::Param*>& pieces, const std::vector<bool>& counted) {
  std::vector<float> host(pieces.size(), 0.0f);
  if (pieces.empty()) return host;
  Tensor squares({static_cast<int64_t>(pieces.size())}, pieces.front()->grad.device());
  for (size_t i = 0; i < pieces.size(); ++i) {
    Tensor sum = squares.flat_slice(static_cast<int64_t>(i), 1);
    if (counted.empty() || counted[i]) kernels::sum_of_squares(pieces[i]->grad, sum);
    else sum.zero();
  }
  squares.copy_to_host(host.data());  // waits for the sums on a GPU
  return host;
}

// Clips piece i by the norm of its param's squares, per_param[param_of[i]]
// (clipnorm), or every piece by the norm of all of per_param and `elsewhere`
// (global_clipnorm; what other tasks' params add).
void clip_by_squares(const std::vector<nn::Param*>& pieces, const std::vector<size_t>& param_of,
                     const std::vector<float>& per_param, double elsewhere, double clipnorm, double global_clipnorm) {
  if (pieces.empty()) return;
  const Device device = pieces.front()->grad.device();
  if (clipnorm > 0.0) {
    Tensor squares({static_cast<int64_t>(per_param.size())}, device);
    squares.copy_from_host(per_param.data());
    for (size_t i = 0; i < pieces.size(); ++i)
      kernels::clip_by_norm(pieces[i]->grad, squares.flat_slice(static_cast<int64_t>(param_of[i]), 1),
                            static_cast<float>(clipnorm));
    return;
  }
  double sum = elsewhere;  // (in double, as GradientClipper's kernel sums)
  for (float v : per_param) sum += v;
  const float total = static_cast<float>(sum);
  Tensor norm({1}, device);
  norm.copy_from_host(&total);
  for (nn::Param* p : pieces) kernels::clip_by_norm(p->grad, norm, static_cast<float>(global_clipnorm));
}

}  // namespace

void clip_pieces_by_norm(const std::vector<nn::Param*>& pieces, const std::vector<PieceOf>& of, size_t params,
                         comm::Communicator& workers, double clipnorm, double global_clipnorm) {
  if (clipnorm <= 0.0 && global_clipnorm <= 0.0) return;
  DT_CHECK_EQ(pieces.size(), of.size());
  const std::vector<float> host = piece_squares(pieces, {});
  std::vector<float> per_param(params, 0.0f);
  std::vector<size_t> param_of;
  for (size_t i = 0; i < host.size(); ++i) {
    per_param[of[i].param] += host[i];
    param_of.push_back(of[i].param);
  }
  if (workers.size() > 1) workers.all_reduce(per_param.data(), per_param.size(), comm::ReduceOp::kSum);
  clip_by_squares(pieces, param_of, per_param, 0.0, clipnorm, global_clipnorm);
}

void clip_split_by_norm(const std::vector<nn::Param*>& params, const std::vector<bool>& counted,
                        comm::Communicator* parts, comm::Communicator* stages, double clipnorm,
                        double global_clipnorm) {
  if (clipnorm <= 0.0 && global_clipnorm <= 0.0) return;
  DT_CHECK_EQ(params.size(), counted.size());
  // Each param's sum of squares, this task's share, summed over the parts.
  std::vector<float> squares = piece_squares(params, counted);
  if (parts && parts->size() > 1) parts->all_reduce(squares.data(), squares.size(), comm::ReduceOp::kSum);
  double elsewhere = 0.0;  // global_clipnorm: the other stages' squares (a stage without params takes part too)
  if (global_clipnorm > 0.0 && stages && stages->size() > 1) {
    double own = 0.0;
    for (float v : squares) own += v;
    float all = static_cast<float>(own);
    stages->all_reduce(&all, 1, comm::ReduceOp::kSum);
    elsewhere = static_cast<double>(all) - own;
  }
  std::vector<size_t> param_of(params.size());
  for (size_t i = 0; i < param_of.size(); ++i) param_of[i] = i;
  clip_by_squares(params, param_of, squares, elsewhere, clipnorm, global_clipnorm);
}

}  // namespace dtrain::strategy
