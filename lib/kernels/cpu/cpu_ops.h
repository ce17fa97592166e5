// The CPU backend's op functions: the same signatures as ops.h, in dtrain::kernels::cpu.
// ops.cpp dispatches here for tensors on the CPU. Not included outside lib/kernels.
#pragma once

#include "kernels/ops.h"

namespace dtrain::kernels::cpu {

void set_num_threads(int threads);
int num_threads();

void dense_forward(const Tensor& x, const Tensor& w, const Tensor* b, Activation act, Tensor& y);
void dense_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx);
void dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db);

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2DParams& p,
                    Activation act, Tensor& y);
void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Conv2DParams& p, Tensor& dx);
void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Conv2DParams& p, Tensor& dw,
                             Tensor* db);

void pool2d_forward(const Tensor& x, const Pool2DParams& p, Tensor& y, Workspace* ws);
void pool2d_backward(const Tensor& dy, const Pool2DParams& p, const Workspace* ws, Tensor& dx);

void activation_forward(Activation act, const Tensor& x, Tensor& y);
void activation_backward(Activation act, const Tensor& y, const Tensor& dy, Tensor& dx);

void batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 float epsilon, Tensor& y, Tensor& mean, Tensor& variance);
void batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& mean, const Tensor& variance, float epsilon,
                                  Tensor& y);
void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                         const Tensor& mean, const Tensor& variance, float epsilon, Tensor& dx,
                         Tensor& dgamma, Tensor& dbeta);

void dropout_forward(const Tensor& x, float rate, uint64_t seed, Tensor& y, Tensor& mask);
void multiply(const Tensor& a, const Tensor& b, Tensor& out);
void axpy(float alpha, const Tensor& x, Tensor& y);

}  // namespace dtrain::kernels::cpu
