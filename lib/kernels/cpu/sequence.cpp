// Own loops for the transformer's per-row ops: gelu (forward, and every
// activation's backward from its input), layer normalization over the last
// axis, and the embedding gather / scatter-add. float32; rows run in parallel
// with OpenMP and each output element is written by one thread in a fixed
// order, so results do not depend on the thread count. The formulas of gelu
// and of a layer-normalised row are element_math.h's, shared with CUDA.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/element_math.h"
#include "tensor/bfloat16.h"

namespace dtrain::kernels::cpu {
namespace {

void require_f32(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t && t->defined()) DT_CHECK(t->dtype() == DType::kF32, op, " runs in float32");
}

template <class T>
void activate_loop(Activation act, const T* x, T* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) store(y + i, math::activate(act, value_of(x[i])));
}

}  // namespace

void activation_by_formula(Activation act, const Tensor& x, Tensor& y) {
  DT_CHECK_EQ(x.numel(), y.numel());
  DT_CHECK(x.dtype() == y.dtype(), "activation between dtypes");
  if (x.dtype() == DType::kBF16) return activate_loop(act, x.data_bf16(), y.data_bf16(), x.numel());
  activate_loop(act, x.data(), y.data(), x.numel());
}

void activation_backward_from_input(Activation act, const Tensor& x, const Tensor& dy, Tensor& dx) {
  DT_CHECK_EQ(x.numel(), dy.numel());
  DT_CHECK_EQ(x.numel(), dx.numel());
  DT_CHECK(act != Activation::kSoftmax, "softmax has no element-wise gradient");
  require_f32("activation_backward_from_input", {&x, &dy, &dx});
  if (grad_from_input(act)) return gelu_backward(act, x, dy, dx);
  const float* px = x.data();
  const float* pdy = dy.data();
  float* pdx = dx.data();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) pdx[i] = math::activation_grad_from_input(act, px[i], pdy[i]);
}

void layer_norm_forward(const Tensor& x, const Tensor* gamma, const Tensor* beta, float epsilon, Tensor& y,
                        Tensor& mean, Tensor& rstd) {
  require_f32("layer_norm_forward", {&x, gamma, beta, &y, &mean, &rstd});
  const int64_t d = x.dim(-1), rows = x.numel() / d;
  DT_CHECK_EQ(y.numel(), x.numel());
  DT_CHECK_EQ(mean.numel(), rows);
  DT_CHECK_EQ(rstd.numel(), rows);
  const float* px = x.data();
  const float* g = gamma ? gamma->data() : nullptr;
  const float* b = beta ? beta->data() : nullptr;
  float* py = y.data();
  float* pm = mean.data();
  float* pr = rstd.data();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) math::layer_norm_row(px + r * d, g, b, epsilon, d, py + r * d, pm + r, pr + r);
}

void layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor* gamma, const Tensor& mean,
                         const Tensor& rstd, Tensor& dx, Tensor* dgamma, Tensor* dbeta) {
  require_f32("layer_norm_backward", {&x, &dy, gamma, &mean, &rstd, &dx, dgamma, dbeta});
  const int64_t d = x.dim(-1), rows = x.numel() / d;
  DT_CHECK_EQ(dx.numel(), x.numel());
  const float* px = x.data();
  const float* pdy = dy.data();
  const float* g = gamma ? gamma->data() : nullptr;
  const float* pm = mean.data();
  const float* pr = rstd.data();
  float* pdx = dx.data();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) math::layer_norm_grad_row(px + r * d, pdy + r * d, g, pm[r], pr[r], d, pdx + r * d);
  if (!dgamma && !dbeta) return;
  // Column sums in chunks of rows (in parallel, reading rows contiguously), then
  // the chunks' partial sums in chunk order: the same result for any thread count.
  constexpr int64_t kChunkRows = 64;
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  std::vector<double> partial(static_cast<size_t>(chunks * 2 * d), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double* sg = partial.data() + c * 2 * d;
    double* sb = sg + d;
    for (int64_t r = c * kChunkRows; r < std::min(rows, (c + 1) * kChunkRows); ++r)
      for (int64_t j = 0; j < d; ++j) {
        const float v = pdy[r * d + j];
        sg[j] += v * (px[r * d + j] - pm[r]) * pr[r];
        sb[j] += v;
      }
  }
  for (int64_t j = 0; j < d; ++j) {
    double sg = 0.0, sb = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += partial[c * 2 * d + j];
      sb += partial[c * 2 * d + d + j];
    }
    if (dgamma) dgamma->data()[j] = static_cast<float>(sg);
    if (dbeta) dbeta->data()[j] = static_cast<float>(sb);
  }
}

namespace {

// The token id of row r, checked against the vocabulary.
int64_t token_id(const float* ids, int64_t r, int64_t vocabulary) {
  const float v = ids[r];
  const auto id = static_cast<int64_t>(v);
  if (!(v >= 0.0f) || static_cast<float>(id) != v || id >= vocabulary)
    throw IoError(str("embedding: token id ", v, " (position ", r, " of the batch) is not an integer in [0, ",
                      vocabulary, "); the data's token ids must be below the embedding's input_dim"));
  return id;
}

}  // namespace

// The whole table is the part that starts at row 0.
void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y) {
  embedding_forward_part(ids, table, 0, table.dim(0), y);
}

void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) {
  const float* pi = ids.data();
  for (int64_t r = 0; r < ids.numel(); ++r) token_id(pi, r, dtable.dim(0));  // checked outside the parallel loop
  embedding_backward_part(ids, dy, 0, dtable);
}

void embedding_forward_part(const Tensor& ids, const Tensor& table, int64_t first, int64_t vocabulary, Tensor& y) {
  require_f32("embedding_forward_part", {&ids, &table, &y});
  const int64_t rows = ids.numel(), part = table.dim(0), d = table.dim(1);
  DT_CHECK_EQ(y.numel(), rows * d);
  const float* pi = ids.data();
  for (int64_t r = 0; r < rows; ++r) token_id(pi, r, vocabulary);  // every id checked before any copy
  const float* pt = table.data();
  float* py = y.data();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = static_cast<int64_t>(pi[r]) - first;
    if (at >= 0 && at < part) std::memcpy(py + r * d, pt + at * d, static_cast<size_t>(d) * sizeof(float));
    else std::memset(py + r * d, 0, static_cast<size_t>(d) * sizeof(float));
  }
}

void embedding_backward_part(const Tensor& ids, const Tensor& dy, int64_t first, Tensor& dtable) {
  require_f32("embedding_backward_part", {&ids, &dy, &dtable});
  const int64_t rows = ids.numel(), part = dtable.dim(0), d = dtable.dim(1);
  DT_CHECK_EQ(dy.numel(), rows * d);
  const float* pi = ids.data();
  const float* pdy = dy.data();
  float* pt = dtable.data();
  dtable.zero();
  // Each thread owns a range of columns and adds the rows in order.
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < d; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t at = static_cast<int64_t>(pi[r]) - first;
      if (at >= 0 && at < part) pt[at * d + j] += pdy[r * d + j];
    }
}

}  // namespace dtrain::kernels::cpu
