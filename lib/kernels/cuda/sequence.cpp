// The transformer layers' CUDA ops (ops.h) but attention (attention.cpp):
// gelu's gradient, layer normalization, the embedding gather / scatter, each
// checking shapes and launching sequence_bodies.h's bodies on the compute
// stream. float32.
#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elements.h"
#include "kernels/cuda/launchers.h"

namespace dtrain::kernels::cuda {
namespace {

// The ids come from the host's batch; reading them back checks them before a
// kernel could index outside the table (one small copy per call).
void check_ids(const Tensor& ids, int64_t vocabulary) {
  const Tensor host = ids.to_host();
  const float* p = host.data();
  for (int64_t r = 0; r < host.numel(); ++r) {
    const auto id = static_cast<int64_t>(p[r]);
    if (!(p[r] >= 0.0f) || static_cast<float>(id) != p[r] || id >= vocabulary)
      throw IoError(str("embedding: token id ", p[r], " (position ", r, " of the batch) is not an integer in [0, ",
                        vocabulary, "); the data's token ids must be below the embedding's input_dim"));
  }
}

}  // namespace

void activation_backward_from_input(Activation act, const Tensor& x, const Tensor& dy, Tensor& dx) {
  DT_CHECK(x.numel() == dy.numel() && x.numel() == dx.numel(), "activation_backward_from_input sizes");
  require_f32("activation_backward_from_input", {&x, &dy, &dx});
  launch(ActivationGradFromInputBody{x.data(), dy.data(), dx.data(), act}, x.numel());
}

void layer_norm_forward(const Tensor& x, const Tensor* gamma, const Tensor* beta, float epsilon, Tensor& y,
                        Tensor& mean, Tensor& rstd) {
  require_f32("layer_norm_forward", {&x, gamma, beta, &y, &mean, &rstd});
  const int64_t d = x.dim(-1), rows = x.numel() / d;
  DT_CHECK(y.numel() == x.numel() && mean.numel() == rows && rstd.numel() == rows, "layer_norm_forward sizes");
  launch(LayerNormRowsBody{x.data(), gamma ? gamma->data() : nullptr, beta ? beta->data() : nullptr, epsilon, d,
                           y.data(), mean.data(), rstd.data()},
         rows);
}

void layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor* gamma, const Tensor& mean,
                         const Tensor& rstd, Tensor& dx, Tensor* dgamma, Tensor* dbeta) {
  require_f32("layer_norm_backward", {&x, &dy, gamma, &mean, &rstd, &dx, dgamma, dbeta});
  const int64_t d = x.dim(-1), rows = x.numel() / d;
  launch(LayerNormBackwardRowsBody{x.data(), dy.data(), gamma ? gamma->data() : nullptr, mean.data(), rstd.data(), d,
                                   dx.data()},
         rows);
  if (dgamma) column_sums(LayerNormGammaValue{dy.data(), x.data(), mean.data(), rstd.data(), d}, rows, d, 1.0f,
                          dgamma->data());
  if (dbeta) column_sums(ElementValue<float>{dy.data(), d}, rows, d, 1.0f, dbeta->data());
}

void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y) {
  require_f32("embedding_forward", {&ids, &table, &y});
  const int64_t d = table.dim(1);
  DT_CHECK_EQ(y.numel(), ids.numel() * d);
  check_ids(ids, table.dim(0));
  launch(EmbeddingGatherBody{ids.data(), table.data(), d, y.data()}, y.numel());
}

void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) {
  require_f32("embedding_backward", {&ids, &dy, &dtable});
  const int64_t d = dtable.dim(1);
  DT_CHECK_EQ(dy.numel(), ids.numel() * d);
  launch(EmbeddingScatterBody{ids.data(), dy.data(), ids.numel(), d, dtable.data()}, dtable.numel());
}

}  // namespace dtrain::kernels::cuda
