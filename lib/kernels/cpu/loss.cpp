// Class losses on the CPU: one row per sample, rows in parallel, with the row
// formula of element_math.h (the GPU uses the same one).
#include <algorithm>

#include "core/check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/element_math.h"

namespace dtrain::kernels::cpu {

void class_loss(LossKind kind, const Tensor& output, const Tensor& labels, float grad_scale, Tensor& row_loss,
                Tensor& row_hit, Tensor* grad) {
  const int64_t n = output.dim(0), c = output.numel() / std::max<int64_t>(n, 1);
  const float* out = output.data();
  const float* lab = labels.data();
  float* loss = row_loss.data();
  float* hit = row_hit.data();
  float* g = grad ? grad->data() : nullptr;
#pragma omp parallel for schedule(static) if (n * c > 16384)
  for (int64_t i = 0; i < n; ++i) {
    bool h = false;
    loss[i] = static_cast<float>(math::class_row_loss(kind, out + i * c, c, static_cast<int32_t>(lab[i]),
                                                      g ? g + i * c : nullptr, grad_scale, &h));
    hit[i] = h ? 1.0f : 0.0f;
  }
}

}  // namespace dtrain::kernels::cpu
