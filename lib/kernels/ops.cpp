// Device dispatch for ops.h: every op runs on the device of its tensors, which
// must all be on one device. CPU tensors go to cpu::; GPU tensors to cuda:: in
// builds with the CUDA backend (DTRAIN_HAVE_CUDA), and are a clear error
// otherwise. A GPU op makes its tensors' GPU the calling thread's GPU.
#include "kernels/ops.h"

#include <initializer_list>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#if DTRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#define DT_GPU(call) cuda::call
#else
#define DT_GPU(call) throw InternalError("unreachable: no CUDA backend")
#endif

namespace dtrain::kernels {
namespace {

// An op's tensor arguments as pointers: optional ones (a bias, a velocity) are
// null when absent, and a workspace's tensors are undefined until a forward set them.
const Tensor* given(const Tensor& t) { return &t; }
const Tensor* given(const Tensor* t) { return t; }

// True when the op's tensors are on a GPU. Throws when they are on different
// devices (naming the op), or on a GPU in a build without the CUDA backend.
template <class... Ts>
bool on_gpu(const char* op, const Tensor& first, const Ts&... rest) {
  const Device device = first.device();
  for (const Tensor* t : std::initializer_list<const Tensor*>{given(rest)...})
    if (t && t->defined() && t->device() != device)
      throw InternalError(str(op, ": tensors on ", device.str(), " and ", t->device().str(), " in one op"));
  if (device.is_cpu()) return false;
#if DTRAIN_HAVE_CUDA
  cuda::use_device(device.index);  // the op runs on its tensors' GPU
#else
  throw ConfigError(str("device ", device.str(), " is not available: this dtrain was built without the CUDA backend"));
#endif
  return true;
}

}  // namespace

void cast(const Tensor& x, Tensor& y) {
  if (on_gpu("cast", x, y)) DT_GPU(cast(x, y));
  else cpu::cast(x, y);
}

void dense_forward(const Tensor& x, const Tensor& w, const Tensor* b, Activation act, Tensor& y) {
  if (on_gpu("dense_forward", x, w, y, b)) DT_GPU(dense_forward(x, w, b, act, y));
  else cpu::dense_forward(x, w, b, act, y);
}
void dense_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  if (on_gpu("dense_backward_data", dy, w, dx)) DT_GPU(dense_backward_data(dy, w, dx));
  else cpu::dense_backward_data(dy, w, dx);
}
void dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) {
  if (on_gpu("dense_backward_weights", x, dy, dw, db)) DT_GPU(dense_backward_weights(x, dy, dw, db));
  else cpu::dense_backward_weights(x, dy, dw, db);
}

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2DParams& p, Activation act,
                    Tensor& y) {
  if (on_gpu("conv2d_forward", x, w, y, b)) DT_GPU(conv2d_forward(x, w, b, p, act, y));
  else cpu::conv2d_forward(x, w, b, p, act, y);
}
void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Conv2DParams& p, Tensor& dx) {
  if (on_gpu("conv2d_backward_data", dy, w, dx)) DT_GPU(conv2d_backward_data(dy, w, p, dx));
  else cpu::conv2d_backward_data(dy, w, p, dx);
}
void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Conv2DParams& p, Tensor& dw, Tensor* db) {
  if (on_gpu("conv2d_backward_weights", x, dy, dw, db)) DT_GPU(conv2d_backward_weights(x, dy, p, dw, db));
  else cpu::conv2d_backward_weights(x, dy, p, dw, db);
}

void pool2d_forward(const Tensor& x, const Pool2DParams& p, Tensor& y, Workspace* ws) {
  if (on_gpu("pool2d_forward", x, y, ws ? &ws->argmax : nullptr)) DT_GPU(pool2d_forward(x, p, y, ws));
  else cpu::pool2d_forward(x, p, y, ws);
}
void pool2d_backward(const Tensor& dy, const Pool2DParams& p, const Workspace* ws, Tensor& dx) {
  if (on_gpu("pool2d_backward", dy, dx, ws ? &ws->input : nullptr, ws ? &ws->output : nullptr,
             ws ? &ws->argmax : nullptr)) DT_GPU(pool2d_backward(dy, p, ws, dx));
  else cpu::pool2d_backward(dy, p, ws, dx);
}

void activation_forward(Activation act, const Tensor& x, Tensor& y) {
  if (on_gpu("activation_forward", x, y)) DT_GPU(activation_forward(act, x, y));
  else cpu::activation_forward(act, x, y);
}
void activation_backward(Activation act, const Tensor& y, const Tensor& dy, Tensor& dx) {
  DT_CHECK(!grad_from_input(act), "activation_backward: gelu's gradient comes from its input");
  if (on_gpu("activation_backward", y, dy, dx)) DT_GPU(activation_backward(act, y, dy, dx));
  else cpu::activation_backward(act, y, dy, dx);
}
void activation_backward_from_input(Activation act, const Tensor& x, const Tensor& dy, Tensor& dx) {
  if (on_gpu("activation_backward_from_input", x, dy, dx)) DT_GPU(activation_backward_from_input(act, x, dy, dx));
  else cpu::activation_backward_from_input(act, x, dy, dx);
}

void layer_norm_forward(const Tensor& x, const Tensor* gamma, const Tensor* beta, float epsilon, Tensor& y,
                        Tensor& mean, Tensor& rstd) {
  if (on_gpu("layer_norm_forward", x, gamma, beta, y, mean, rstd))
    DT_GPU(layer_norm_forward(x, gamma, beta, epsilon, y, mean, rstd));
  else cpu::layer_norm_forward(x, gamma, beta, epsilon, y, mean, rstd);
}
void layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor* gamma, const Tensor& mean,
                         const Tensor& rstd, Tensor& dx, Tensor* dgamma, Tensor* dbeta) {
  if (on_gpu("layer_norm_backward", x, dy, gamma, mean, rstd, dx, dgamma, dbeta))
    DT_GPU(layer_norm_backward(x, dy, gamma, mean, rstd, dx, dgamma, dbeta));
  else cpu::layer_norm_backward(x, dy, gamma, mean, rstd, dx, dgamma, dbeta);
}
void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y) {
  if (on_gpu("embedding_forward", ids, table, y)) DT_GPU(embedding_forward(ids, table, y));
  else cpu::embedding_forward(ids, table, y);
}
void embedding_forward_part(const Tensor& ids, const Tensor& table, int64_t first, int64_t vocabulary, Tensor& y) {
  if (on_gpu("embedding_forward_part", ids, table, y))
    throw ConfigError("an embedding split by vocabulary (tensor_parallel) runs on the CPU only");
  cpu::embedding_forward_part(ids, table, first, vocabulary, y);
}

void embedding_backward_part(const Tensor& ids, const Tensor& dy, int64_t first, Tensor& dtable) {
  if (on_gpu("embedding_backward_part", ids, dy, dtable))
    throw ConfigError("an embedding split by vocabulary (tensor_parallel) runs on the CPU only");
  cpu::embedding_backward_part(ids, dy, first, dtable);
}

void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) {
  if (on_gpu("embedding_backward", ids, dy, dtable)) DT_GPU(embedding_backward(ids, dy, dtable));
  else cpu::embedding_backward(ids, dy, dtable);
}
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p, Tensor& out,
                       Tensor& lse) {
  if (on_gpu("attention_forward", q, k, v, out, lse)) DT_GPU(attention_forward(q, k, v, p, out, lse));
  else cpu::attention_forward(q, k, v, p, out, lse);
}
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const AttentionParams& p, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (on_gpu("attention_backward", q, k, v, out, lse, dout, dq, dk, dv))
    DT_GPU(attention_backward(q, k, v, out, lse, dout, p, dq, dk, dv));
  else cpu::attention_backward(q, k, v, out, lse, dout, p, dq, dk, dv);
}

void batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon, Tensor& y,
                                 Tensor& mean, Tensor& variance) {
  if (on_gpu("batch_norm_forward_training", x, gamma, beta, y, mean, variance))
    DT_GPU(batch_norm_forward_training(x, gamma, beta, epsilon, y, mean, variance));
  else cpu::batch_norm_forward_training(x, gamma, beta, epsilon, y, mean, variance);
}
void batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                                  const Tensor& variance, float epsilon, Tensor& y) {
  if (on_gpu("batch_norm_forward_inference", x, gamma, beta, mean, variance, y))
    DT_GPU(batch_norm_forward_inference(x, gamma, beta, mean, variance, epsilon, y));
  else cpu::batch_norm_forward_inference(x, gamma, beta, mean, variance, epsilon, y);
}
void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                         const Tensor& variance, float epsilon, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  if (on_gpu("batch_norm_backward", x, dy, gamma, mean, variance, dx, dgamma, dbeta))
    DT_GPU(batch_norm_backward(x, dy, gamma, mean, variance, epsilon, dx, dgamma, dbeta));
  else cpu::batch_norm_backward(x, dy, gamma, mean, variance, epsilon, dx, dgamma, dbeta);
}

void dropout_forward(const Tensor& x, float rate, uint64_t seed, Tensor& y, Tensor& mask) {
  if (on_gpu("dropout_forward", x, y, mask)) DT_GPU(dropout_forward(x, rate, seed, y, mask));
  else cpu::dropout_forward(x, rate, seed, y, mask);
}
void multiply(const Tensor& a, const Tensor& b, Tensor& out) {
  if (on_gpu("multiply", a, b, out)) DT_GPU(multiply(a, b, out));
  else cpu::multiply(a, b, out);
}
void axpy(float alpha, const Tensor& x, Tensor& y) {
  if (on_gpu("axpy", x, y)) DT_GPU(axpy(alpha, x, y));
  else cpu::axpy(alpha, x, y);
}
void flag_non_finite(const Tensor& x, Tensor& flag) {
  DT_CHECK(flag.numel() == 1 && flag.dtype() == DType::kF32 && x.dtype() == DType::kF32,
           "flag_non_finite takes float32 values and a one-float flag");
  if (on_gpu("flag_non_finite", x, flag)) DT_GPU(flag_non_finite(x, flag));
  else cpu::flag_non_finite(x, flag);
}
void divide(Tensor& x, float divisor) {
  if (on_gpu("divide", x)) DT_GPU(divide(x, divisor));
  else cpu::divide(x, divisor);
}
void moving_average(Tensor& avg, const Tensor& x, float momentum) {
  if (on_gpu("moving_average", avg, x)) DT_GPU(moving_average(avg, x, momentum));
  else cpu::moving_average(avg, x, momentum);
}

void class_loss(LossKind kind, const Tensor& output, const Tensor& labels, float grad_scale, Tensor& row_loss,
                Tensor& row_hit, Tensor* grad) {
  if (on_gpu("class_loss", output, labels, row_loss, row_hit, grad))
    DT_GPU(class_loss(kind, output, labels, grad_scale, row_loss, row_hit, grad));
  else cpu::class_loss(kind, output, labels, grad_scale, row_loss, row_hit, grad);
}

void sgd_update(Tensor& w, const Tensor& g, Tensor* velocity, const SgdCoeffs& k) {
  if (on_gpu("sgd_update", w, g, velocity)) DT_GPU(sgd_update(w, g, velocity, k));
  else cpu::sgd_update(w, g, velocity, k);
}
void adam_update(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamCoeffs& k) {
  if (on_gpu("adam_update", w, g, m, v)) DT_GPU(adam_update(w, g, m, v, k));
  else cpu::adam_update(w, g, m, v, k);
}
void rmsprop_update(Tensor& w, const Tensor& g, Tensor& velocity, Tensor* momentum, Tensor* average_gradient,
                    const RmspropCoeffs& k) {
  // The backends trust these (one check for both).
  DT_CHECK_EQ(w.numel(), g.numel());
  DT_CHECK_EQ(w.numel(), velocity.numel());
  DT_CHECK(k.momentum == 0.0f || (momentum && momentum->numel() == w.numel()), "rmsprop with momentum needs its slot");
  DT_CHECK(!k.centered || (average_gradient && average_gradient->numel() == w.numel()),
           "centered rmsprop needs an average_gradient slot");
  if (on_gpu("rmsprop_update", w, g, velocity, momentum, average_gradient))
    DT_GPU(rmsprop_update(w, g, velocity, momentum, average_gradient, k));
  else cpu::rmsprop_update(w, g, velocity, momentum, average_gradient, k);
}
void adagrad_update(Tensor& w, const Tensor& g, Tensor& accumulator, const AdagradCoeffs& k) {
  DT_CHECK_EQ(w.numel(), g.numel());
  DT_CHECK_EQ(w.numel(), accumulator.numel());
  if (on_gpu("adagrad_update", w, g, accumulator)) DT_GPU(adagrad_update(w, g, accumulator, k));
  else cpu::adagrad_update(w, g, accumulator, k);
}

void sum_of_squares(const Tensor& x, Tensor& out) {
  if (on_gpu("sum_of_squares", x, out)) DT_GPU(sum_of_squares(x, out));
  else cpu::sum_of_squares(x, out);
}
void clip_by_norm(Tensor& x, const Tensor& squares, float clip_norm) {
  if (on_gpu("clip_by_norm", x, squares)) DT_GPU(clip_by_norm(x, squares, clip_norm));
  else cpu::clip_by_norm(x, squares, clip_norm);
}
void clip_by_value(Tensor& x, float limit) {
  if (on_gpu("clip_by_value", x)) DT_GPU(clip_by_value(x, limit));
  else cpu::clip_by_value(x, limit);
}

}  // namespace dtrain::kernels
