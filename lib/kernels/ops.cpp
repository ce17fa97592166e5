// Device dispatch for ops.h: every op runs on the device of its first tensor, and
// all its tensors must be on that device. Only the CPU backend is built today; a
// CUDA tensor reaching here is a clear error instead of a crash.
#include "kernels/ops.h"

#include "core/error.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"

namespace dtrain::kernels {
namespace {

// Checks that every tensor is on `first`'s device and that the CPU backend serves it.
template <class... Ts>
void require_cpu(const Tensor& first, const Ts&... rest) {
  const Device device = first.device();
  ((void)(rest.device() == device ||
          (throw InternalError(str("op mixes tensors on ", device.str(), " and ",
                                   rest.device().str())),
           false)),
   ...);
  if (!device.is_cpu())
    throw ConfigError(str("device ", device.str(),
                          " is not available: this dtrain was built without the CUDA backend"));
}

}  // namespace

void set_num_threads(int threads) { cpu::set_num_threads(threads); }
int num_threads() { return cpu::num_threads(); }

void dense_forward(const Tensor& x, const Tensor& w, const Tensor* b, Activation act, Tensor& y) {
  require_cpu(x, w, y);
  cpu::dense_forward(x, w, b, act, y);
}
void dense_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  require_cpu(dy, w, dx);
  cpu::dense_backward_data(dy, w, dx);
}
void dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) {
  require_cpu(x, dy, dw);
  cpu::dense_backward_weights(x, dy, dw, db);
}

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2DParams& p,
                    Activation act, Tensor& y) {
  require_cpu(x, w, y);
  cpu::conv2d_forward(x, w, b, p, act, y);
}
void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Conv2DParams& p, Tensor& dx) {
  require_cpu(dy, w, dx);
  cpu::conv2d_backward_data(dy, w, p, dx);
}
void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Conv2DParams& p, Tensor& dw,
                             Tensor* db) {
  require_cpu(x, dy, dw);
  cpu::conv2d_backward_weights(x, dy, p, dw, db);
}

void pool2d_forward(const Tensor& x, const Pool2DParams& p, Tensor& y, Workspace* ws) {
  require_cpu(x, y);
  cpu::pool2d_forward(x, p, y, ws);
}
void pool2d_backward(const Tensor& dy, const Pool2DParams& p, const Workspace* ws, Tensor& dx) {
  require_cpu(dy, dx);
  cpu::pool2d_backward(dy, p, ws, dx);
}

void activation_forward(Activation act, const Tensor& x, Tensor& y) {
  require_cpu(x, y);
  cpu::activation_forward(act, x, y);
}
void activation_backward(Activation act, const Tensor& y, const Tensor& dy, Tensor& dx) {
  require_cpu(y, dy, dx);
  cpu::activation_backward(act, y, dy, dx);
}

void batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 float epsilon, Tensor& y, Tensor& mean, Tensor& variance) {
  require_cpu(x, gamma, beta, y, mean, variance);
  cpu::batch_norm_forward_training(x, gamma, beta, epsilon, y, mean, variance);
}
void batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& mean, const Tensor& variance, float epsilon,
                                  Tensor& y) {
  require_cpu(x, gamma, beta, mean, variance, y);
  cpu::batch_norm_forward_inference(x, gamma, beta, mean, variance, epsilon, y);
}
void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                         const Tensor& mean, const Tensor& variance, float epsilon, Tensor& dx,
                         Tensor& dgamma, Tensor& dbeta) {
  require_cpu(x, dy, gamma, mean, variance, dx, dgamma, dbeta);
  cpu::batch_norm_backward(x, dy, gamma, mean, variance, epsilon, dx, dgamma, dbeta);
}

void dropout_forward(const Tensor& x, float rate, uint64_t seed, Tensor& y, Tensor& mask) {
  require_cpu(x, y, mask);
  cpu::dropout_forward(x, rate, seed, y, mask);
}
void multiply(const Tensor& a, const Tensor& b, Tensor& out) {
  require_cpu(a, b, out);
  cpu::multiply(a, b, out);
}
void axpy(float alpha, const Tensor& x, Tensor& y) {
  require_cpu(x, y);
  cpu::axpy(alpha, x, y);
}

}  // namespace dtrain::kernels
