// The op functions every layer calls, whatever the device.
//
// Each function checks that its tensors are on one device and dispatches to that
// device's backend: cpu:: (oneDNN and own loops) or cuda:: (cuBLASLt, cuDNN and
// own kernels, in builds with the CUDA backend). Shapes
// follow Keras' layouts: activations NHWC, Dense kernels (in, out), Conv2D kernels
// (kh, kw, in, out). Outputs must be allocated by the caller with the right shape.
// The devices themselves (listing GPUs, selecting one, waiting for one, TF32) are
// in kernels/device.h.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace dtrain::kernels {

// kGelu is x * Phi(x) (erf), kGeluTanh its tanh approximation: their backward
// needs the input, not the output (activation_backward_from_input).
enum class Activation { kLinear, kRelu, kSigmoid, kTanh, kSoftmax, kGelu, kGeluTanh };
// Whether act's backward is computed from its input (gelu) rather than its output.
inline bool grad_from_input(Activation act) { return act == Activation::kGelu || act == Activation::kGeluTanh; }

// Opaque per-call state a forward op leaves for its backward: the CPU keeps the
// max-pooling argmax in `bytes`; the GPU keeps the pooling input and output
// (cuDNN) or the argmax (own kernels).
struct Workspace {
  std::vector<uint8_t> bytes;
  Tensor input, output, argmax;
};

// ---- Dense (matmul) ----
// y = act(x . w + b)     x (N, in), w (in, out), b (out) or null, y (N, out).
// act must not be kSoftmax (apply activation_forward after a linear Dense).
void dense_forward(const Tensor& x, const Tensor& w, const Tensor* b, Activation act, Tensor& y);
// dx = dy . w^T          dy (N, out), w (in, out), dx (N, in)
void dense_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx);
// dw = x^T . dy, db = sum_n dy     x (N, in), dy (N, out), dw (in, out), db (out) or null
void dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db);

// ---- Conv2D ----
struct Conv2DParams {
  int64_t stride[2] = {1, 1};
  int64_t pad_before[2] = {0, 0};  // top, left
  int64_t pad_after[2] = {0, 0};   // bottom, right
};
// y = act(conv(x, w) + b)   x (N, H, W, C), w (KH, KW, C, F), b (F) or null, y (N, OH, OW, F)
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2DParams& p,
                    Activation act, Tensor& y);
// dx from dy               dy (N, OH, OW, F), w (KH, KW, C, F), dx (N, H, W, C)
void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Conv2DParams& p, Tensor& dx);
// dw, db from x and dy      dw (KH, KW, C, F), db (F) or null
void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Conv2DParams& p, Tensor& dw,
                             Tensor* db);

// ---- Pooling ----
enum class PoolKind { kMax, kAverage };  // average excludes padding, as Keras/TF do
struct Pool2DParams {
  PoolKind kind = PoolKind::kMax;
  int64_t kernel[2] = {2, 2};
  int64_t stride[2] = {2, 2};
  int64_t pad_before[2] = {0, 0};
  int64_t pad_after[2] = {0, 0};
};
// x (N, H, W, C), y (N, OH, OW, C); ws is filled for max pooling when training.
void pool2d_forward(const Tensor& x, const Pool2DParams& p, Tensor& y, Workspace* ws);
// dy (N, OH, OW, C), dx (N, H, W, C); ws from the forward call (max pooling).
void pool2d_backward(const Tensor& dy, const Pool2DParams& p, const Workspace* ws, Tensor& dx);

// ---- Activations ----
// y = act(x); x and y may be the same tensor. Softmax is over the last axis.
void activation_forward(Activation act, const Tensor& x, Tensor& y);
// dx = dy * act'(.), computed from y = act(x). dy and dx may be the same tensor.
// Not for gelu (grad_from_input): activation_backward_from_input.
void activation_backward(Activation act, const Tensor& y, const Tensor& dy, Tensor& dx);
// dx = dy * act'(x), from the input x: gelu (any activation but softmax works). float32.
void activation_backward_from_input(Activation act, const Tensor& x, const Tensor& dy, Tensor& dx);

// ---- Batch normalization over the last (channels) axis ----
// Training: normalises with the batch statistics and returns them (mean, variance: (C)).
void batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 float epsilon, Tensor& y, Tensor& mean, Tensor& variance);
// Inference: normalises with given statistics.
void batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& mean, const Tensor& variance, float epsilon,
                                  Tensor& y);
// Gradients given the batch statistics from the training forward.
void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                         const Tensor& mean, const Tensor& variance, float epsilon, Tensor& dx,
                         Tensor& dgamma, Tensor& dbeta);

// ---- Transformer layers (float32) ----
// Layer normalization over the last axis (D), rows = numel / D:
// y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(variance + epsilon).
// gamma / beta null: scale 1 / center 0. mean and rstd (rows) are kept for backward.
void layer_norm_forward(const Tensor& x, const Tensor* gamma, const Tensor* beta, float epsilon, Tensor& y,
                        Tensor& mean, Tensor& rstd);
// dx from dy; dgamma / dbeta (D) overwritten where not null.
void layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor* gamma, const Tensor& mean,
                         const Tensor& rstd, Tensor& dx, Tensor* dgamma, Tensor* dbeta);
// y[r] = table[ids[r]]    ids (rows) token ids held as floats, table (V, D), y (rows, D).
// An id outside [0, V) is an InputError naming it.
void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y);
// dtable (V, D) = the rows of dy added at their ids (overwritten; rows in order).
void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable);
// A table split by rows (tensor parallelism's vocabulary split): `table` holds
// rows [first, first + table.dim(0)) of a vocabulary of `vocabulary` ids. y[r] is
// that row for an id inside the part and zeros for the others (their part's task
// has them); every id is checked against `vocabulary`. On the CPU only.
void embedding_forward_part(const Tensor& ids, const Tensor& table, int64_t first, int64_t vocabulary, Tensor& y);
// dtable = the rows of dy added at the ids inside the part (overwritten).
void embedding_backward_part(const Tensor& ids, const Tensor& dy, int64_t first, Tensor& dtable);
// Scaled dot-product attention of `heads` heads: q, k (N, T, H, Dk), v (N, T, H, Dv)
// -> out (N, T, H, Dv) and lse (N, H, T), each row's log-sum-exp of its scores,
// kept for the backward pass. Causal: position t attends to positions <= t. The
// CPU computes it in blocks with an online softmax (flash attention), so no
// (T, T) matrix is kept.
struct AttentionParams {
  int64_t heads = 1;
  float scale = 1.0f;  // the scores are scale * q . k (1 / sqrt(Dk))
  bool causal = false;
  // Dropout on the attention weights (Keras' MultiHeadAttention dropout): weight
  // (sample, head, i, j) is kept with probability 1 - dropout and scaled by
  // 1 / (1 - dropout), by dropout_multiplier(seed, ((sample * heads + head) * T + i) * T + j).
  // The softmax's normaliser is the undropped one, as in Keras. 0: none.
  float dropout = 0.0f;
  uint64_t seed = 0;
};
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p, Tensor& out,
                       Tensor& lse);
// dq, dk, dv (overwritten) from dout, the forward's inputs, out and lse.
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const AttentionParams& p, Tensor& dq, Tensor& dk, Tensor& dv);

// ---- Element-wise (own loops) ----
// Inverted dropout: mask[i] = 0 with probability rate, else 1/(1-rate); y = x * mask.
// The mask is a pure function of (seed, i), so it is the same for any thread count.
void dropout_forward(const Tensor& x, float rate, uint64_t seed, Tensor& y, Tensor& mask);
// out = a * b (element-wise)
void multiply(const Tensor& a, const Tensor& b, Tensor& out);
// y += alpha * x
void axpy(float alpha, const Tensor& x, Tensor& y);
// x /= divisor
void divide(Tensor& x, float divisor);
// avg = momentum * avg + (1 - momentum) * x     (batch-norm moving statistics)
void moving_average(Tensor& avg, const Tensor& x, float momentum);

// ---- Losses over class labels ----
enum class LossKind { kCrossEntropyLogits, kCrossEntropyProbabilities, kMse };
// output (N, C); labels (N) class indices held as floats; row_loss (N) and
// row_hit (N, 1 where the row's argmax is its label) are written. grad (N, C) or
// null: d(sum of row losses * grad_scale)/d(output). Targets of kMse are one-hot.
void class_loss(LossKind kind, const Tensor& output, const Tensor& labels, float grad_scale,
                Tensor& row_loss, Tensor& row_hit, Tensor* grad);

// ---- Optimizer updates (element-wise over w, g and the slots; Keras' formulas) ----
struct SgdCoeffs {
  float lr = 0.0f, momentum = 0.0f;
  bool nesterov = false;
};
// momentum 0: w -= lr * g. Else v = mu*v - lr*g; w += v (Nesterov: w += mu*v - lr*g).
void sgd_update(Tensor& w, const Tensor& g, Tensor* velocity, const SgdCoeffs& k);
struct AdamCoeffs {
  float decay = 0.0f, b1 = 0.9f, b2 = 0.999f, alpha = 0.0f, eps = 1e-7f;
};
// w -= decay*w; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; w -= alpha * m / (sqrt(v) + eps)
void adam_update(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamCoeffs& k);
struct RmspropCoeffs {
  float lr = 0.0f, rho = 0.9f, momentum = 0.0f, eps = 1e-7f;
  bool centered = false;
};
// v = rho*v + (1-rho)*g^2; centered: a = rho*a + (1-rho)*g, d = v - a^2 + eps; else d = v + eps;
// step = lr*g / sqrt(d); momentum > 0: m = momentum*m + step, w -= m; else w -= step.
// `momentum` is needed when k.momentum > 0, `average_gradient` when k.centered (else null).
void rmsprop_update(Tensor& w, const Tensor& g, Tensor& velocity, Tensor* momentum, Tensor* average_gradient,
                    const RmspropCoeffs& k);
struct AdagradCoeffs {
  float lr = 0.0f, eps = 1e-7f;
};
// a += g^2; w -= lr*g / sqrt(a + eps)
void adagrad_update(Tensor& w, const Tensor& g, Tensor& accumulator, const AdagradCoeffs& k);

// ---- Precision ----

// y = x converted to y's dtype (float32 <-> bfloat16 or float16, rounding to
// nearest even); same number of elements. On a GPU: between float32 and either.
void cast(const Tensor& x, Tensor& y);
// flag (one float32) = 1 when x (float32) holds an inf or NaN; else left as it
// is (start it at 0). On a GPU nothing waits: the flag stays on the device.
void flag_non_finite(const Tensor& x, Tensor& flag);

// ---- Gradient clipping (Keras' clipnorm, global_clipnorm, clipvalue) ----
// out (1) = sum of x^2 (summed in double). On a GPU the sum stays there: nothing waits for it.
void sum_of_squares(const Tensor& x, Tensor& out);
// x = x * clip_norm / max(norm, clip_norm), norm = sqrt(the sum of the elements of `squares`):
// squares (1) holds x's own sum (clipnorm), squares (P) one sum per gradient (global_clipnorm).
// A NaN norm makes x NaN, as in Keras.
void clip_by_norm(Tensor& x, const Tensor& squares, float clip_norm);
// x = min(max(x, -limit), limit); NaN stays NaN.
void clip_by_value(Tensor& x, float limit);

}  // namespace dtrain::kernels
