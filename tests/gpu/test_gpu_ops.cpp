// Every op of ops.h on the GPU against the CPU backend: one table of cases, each
// run on both devices from the same inputs, outputs compared element by element
// with |gpu - cpu| <= atol + rtol * |cpu|. Convolutions use FP32 math here
// (TF32 off) so that the tolerance is a float32 one. Labelled gpu: skipped
// (reported as skipped) on machines without a usable GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#if DTRAIN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#include "gpu/gpu_skip.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "unit/tensor_checks.h"

using namespace dtrain;
using kernels::Activation;

namespace {

using Tensors = std::vector<Tensor>;

struct OpCase {
  std::string name;
  std::vector<Shape> inputs;
  // Runs the op on the inputs' device (all inputs are on it); returns its outputs.
  std::function<Tensors(Tensors&)> run;
  double atol = 1e-4, rtol = 1e-4;
  double lo = -1.0, hi = 1.0;  // input value range
};


Tensor on(const Tensor& like, const Shape& shape) { return Tensor(shape, like.device()); }

std::vector<OpCase> dense_cases() {
  std::vector<OpCase> out;
  for (auto [n, in, units] : {std::tuple{1, 3, 2}, std::tuple{32, 784, 128}, std::tuple{130, 257, 10}})
    for (Activation act : {Activation::kLinear, Activation::kRelu, Activation::kSigmoid, Activation::kTanh})
      for (bool bias : {true, false})
        out.push_back({"dense_forward " + std::to_string(n) + "x" + std::to_string(in) + "x" + std::to_string(units) +
                           " act " + std::to_string(static_cast<int>(act)) + (bias ? " bias" : ""),
                       {{n, in}, {in, units}, {units}},
                       [=](Tensors& t) {
                         Tensor y = on(t[0], {t[0].dim(0), t[1].dim(1)});
                         kernels::dense_forward(t[0], t[1], bias ? &t[2] : nullptr, act, y);
                         return Tensors{y};
                       }});
  for (auto [n, in, units] : {std::tuple{1, 3, 2}, std::tuple{64, 300, 70}})
    out.push_back({"dense_backward " + std::to_string(n) + "x" + std::to_string(in) + "x" + std::to_string(units),
                   {{n, in}, {in, units}, {n, units}},
                   [](Tensors& t) {
                     Tensor dx = on(t[0], t[0].shape()), dw = on(t[0], t[1].shape()), db = on(t[0], {t[1].dim(1)});
                     kernels::dense_backward_data(t[2], t[1], dx);
                     kernels::dense_backward_weights(t[0], t[2], dw, &db);
                     return Tensors{dx, dw, db};
                   }});
  return out;
}

std::vector<OpCase> conv_cases() {
  struct C {
    int64_t n, h, w, c, k, f, stride;
    bool same;
  };
  std::vector<OpCase> out;
  for (const C& c : {C{2, 8, 8, 1, 3, 4, 1, false}, C{3, 28, 28, 1, 3, 32, 1, false}, C{2, 9, 9, 3, 3, 5, 1, true},
                     C{2, 8, 8, 3, 3, 6, 2, true}, C{1, 7, 6, 2, 5, 3, 2, true}}) {
    kernels::Conv2DParams p;
    p.stride[0] = p.stride[1] = c.stride;
    int64_t oh = (c.h - c.k) / c.stride + 1, ow = (c.w - c.k) / c.stride + 1;
    if (c.same) {
      oh = (c.h + c.stride - 1) / c.stride;
      ow = (c.w + c.stride - 1) / c.stride;
      const int64_t th = std::max<int64_t>((oh - 1) * c.stride + c.k - c.h, 0);
      const int64_t tw = std::max<int64_t>((ow - 1) * c.stride + c.k - c.w, 0);
      p.pad_before[0] = th / 2;
      p.pad_after[0] = th - th / 2;
      p.pad_before[1] = tw / 2;
      p.pad_after[1] = tw - tw / 2;
    }
    const std::string name = "conv " + std::to_string(c.h) + "x" + std::to_string(c.w) + "x" + std::to_string(c.c) +
                             " k" + std::to_string(c.k) + " f" + std::to_string(c.f) + " s" + std::to_string(c.stride) +
                             (c.same ? " same" : " valid");
    const Shape x{c.n, c.h, c.w, c.c}, w{c.k, c.k, c.c, c.f}, y{c.n, oh, ow, c.f};
    out.push_back({name + " forward relu+bias", {x, w, {c.f}}, [=](Tensors& t) {
                     Tensor out_y = on(t[0], y);
                     kernels::conv2d_forward(t[0], t[1], &t[2], p, Activation::kRelu, out_y);
                     return Tensors{out_y};
                   }});
    out.push_back({name + " backward", {x, w, y}, [=](Tensors& t) {
                     Tensor dx = on(t[0], x), dw = on(t[0], w), db = on(t[0], {c.f});
                     kernels::conv2d_backward_data(t[2], t[1], p, dx);
                     kernels::conv2d_backward_weights(t[0], t[2], p, dw, &db);
                     return Tensors{dx, dw, db};
                   },
                   1e-3, 1e-4});
  }
  return out;
}

std::vector<OpCase> pool_cases() {
  struct C {
    kernels::PoolKind kind;
    int64_t h, w, k, s, pad_after;
  };
  std::vector<OpCase> out;
  for (const C& c : {C{kernels::PoolKind::kMax, 26, 26, 2, 2, 0}, C{kernels::PoolKind::kMax, 7, 5, 2, 2, 1},
                     C{kernels::PoolKind::kAverage, 8, 8, 2, 2, 0}, C{kernels::PoolKind::kAverage, 7, 7, 2, 2, 1},
                     C{kernels::PoolKind::kAverage, 6, 6, 6, 1, 0}}) {
    kernels::Pool2DParams p;
    p.kind = c.kind;
    p.kernel[0] = p.kernel[1] = c.k;
    p.stride[0] = p.stride[1] = c.s;
    p.pad_after[0] = p.pad_after[1] = c.pad_after;
    const int64_t oh = (c.h + c.pad_after - c.k) / c.s + 1, ow = (c.w + c.pad_after - c.k) / c.s + 1;
    const Shape x{3, c.h, c.w, 4}, y{3, oh, ow, 4};
    out.push_back({"pool " + std::string(c.kind == kernels::PoolKind::kMax ? "max " : "avg ") + std::to_string(c.h) +
                       "x" + std::to_string(c.w) + " k" + std::to_string(c.k) + " pad_after " +
                       std::to_string(c.pad_after),
                   {x, y},
                   [=](Tensors& t) {
                     Tensor out_y = on(t[0], y), dx = on(t[0], x);
                     kernels::Workspace ws;
                     kernels::pool2d_forward(t[0], p, out_y, &ws);
                     kernels::pool2d_backward(t[1], p, &ws, dx);
                     return Tensors{out_y, dx};
                   }});
  }
  // Ties: after a ReLU, a window of negatives is all zeros; the gradient goes to
  // the first maximum on both devices.
  kernels::Pool2DParams p;
  p.kind = kernels::PoolKind::kMax;
  const Shape x{4, 12, 12, 3}, y{4, 6, 6, 3};
  out.push_back({"pool max over relu outputs (tied zeros)", {x, y}, [=](Tensors& t) {
                   Tensor r = on(t[0], x), out_y = on(t[0], y), dx = on(t[0], x);
                   kernels::activation_forward(Activation::kRelu, t[0], r);
                   kernels::Workspace ws;
                   kernels::pool2d_forward(r, p, out_y, &ws);
                   kernels::pool2d_backward(t[1], p, &ws, dx);
                   return Tensors{out_y, dx};
                 }});
  return out;
}

std::vector<OpCase> other_cases() {
  std::vector<OpCase> out;
  for (Activation act : {Activation::kRelu, Activation::kSigmoid, Activation::kTanh, Activation::kSoftmax})
    out.push_back({"activation " + std::to_string(static_cast<int>(act)), {{33, 10}, {33, 10}}, [=](Tensors& t) {
                     Tensor y = on(t[0], t[0].shape()), dx = on(t[0], t[0].shape());
                     kernels::activation_forward(act, t[0], y);
                     kernels::activation_backward(act, y, t[1], dx);
                     return Tensors{y, dx};
                   }});
  for (const Shape& s : {Shape{64, 16}, Shape{8, 13, 13, 32}})
    out.push_back({"batch_norm " + std::to_string(s.size()) + "-d", {s, {s.back()}, {s.back()}, s},
                   [](Tensors& t) {
                     const int64_t c = t[0].dim(-1);
                     Tensor y = on(t[0], t[0].shape()), mean = on(t[0], {c}), var = on(t[0], {c});
                     kernels::batch_norm_forward_training(t[0], t[1], t[2], 1e-3f, y, mean, var);
                     Tensor yi = on(t[0], t[0].shape());
                     kernels::batch_norm_forward_inference(t[0], t[1], t[2], mean, var, 1e-3f, yi);
                     Tensor dx = on(t[0], t[0].shape()), dg = on(t[0], {c}), dbeta = on(t[0], {c});
                     kernels::batch_norm_backward(t[0], t[3], t[1], mean, var, 1e-3f, dx, dg, dbeta);
                     return Tensors{y, mean, var, yi, dx, dg, dbeta};
                   },
                   1e-3, 1e-3});
  out.push_back({"dropout, multiply, axpy, divide, moving_average", {{7, 100}, {7, 100}}, [](Tensors& t) {
                   Tensor y = on(t[0], t[0].shape()), mask = on(t[0], t[0].shape());
                   kernels::dropout_forward(t[0], 0.4f, 1234, y, mask);
                   Tensor prod = on(t[0], t[0].shape());
                   kernels::multiply(y, t[1], prod);
                   kernels::axpy(0.5f, t[1], prod);
                   kernels::divide(prod, 3.0f);
                   Tensor avg = t[1].clone();
                   kernels::moving_average(avg, prod, 0.9f);
                   return Tensors{y, mask, prod, avg};
                 }});
  for (kernels::LossKind kind : {kernels::LossKind::kCrossEntropyLogits, kernels::LossKind::kCrossEntropyProbabilities,
                                 kernels::LossKind::kMse})
    out.push_back({"class_loss " + std::to_string(static_cast<int>(kind)), {{50, 10}, {50}}, [=](Tensors& t) {
                     // Labels 0..9 from the second input's values.
                     Tensor labels_host = t[1].to_host();
                     for (int64_t i = 0; i < 50; ++i) labels_host.data()[i] = static_cast<float>(i % 10);
                     Tensor labels = labels_host.to(t[0].device());
                     Tensor probs = on(t[0], t[0].shape());
                     kernels::activation_forward(Activation::kSoftmax, t[0], probs);
                     const Tensor& output = kind == kernels::LossKind::kCrossEntropyLogits ? t[0] : probs;
                     Tensor loss = on(t[0], {50}), hit = on(t[0], {50}), grad = on(t[0], t[0].shape());
                     kernels::class_loss(kind, output, labels, 0.02f, loss, hit, &grad);
                     return Tensors{loss, hit, grad};
                   }});
  out.push_back({"sgd and adam updates", {{5000}, {5000}}, [](Tensors& t) {
                   Tensor w = t[0].clone(), m = on(t[0], {5000}), v = on(t[0], {5000}), vel = on(t[0], {5000});
                   kernels::AdamCoeffs a;
                   a.alpha = 0.01f;
                   a.decay = 0.004f;
                   for (int i = 0; i < 3; ++i) kernels::adam_update(w, t[1], m, v, a);
                   kernels::SgdCoeffs s;
                   s.lr = 0.1f;
                   s.momentum = 0.9f;
                   kernels::sgd_update(w, t[1], &vel, s);
                   return Tensors{w, m, v, vel};
                 }});
  out.push_back({"rmsprop (centered, momentum) and adagrad updates", {{5000}, {5000}}, [](Tensors& t) {
                   Tensor w = t[0].clone(), v = on(t[0], {5000}), m = on(t[0], {5000}), a = on(t[0], {5000});
                   kernels::RmspropCoeffs r;
                   r.lr = 0.01f;
                   r.momentum = 0.9f;
                   r.centered = true;
                   for (int i = 0; i < 3; ++i) kernels::rmsprop_update(w, t[1], v, &m, &a, r);
                   Tensor acc = on(t[0], {5000});
                   acc.fill(0.1f);
                   kernels::AdagradCoeffs k;
                   k.lr = 0.1f;
                   kernels::adagrad_update(w, t[1], acc, k);
                   return Tensors{w, v, m, a, acc};
                 }});
  out.push_back({"sum of squares, clip by norm (own and global) and by value", {{70000}, {300}}, [](Tensors& t) {
                   Tensor squares = on(t[0], {2});
                   Tensor s0 = squares.flat_slice(0, 1), s1 = squares.flat_slice(1, 1);
                   kernels::sum_of_squares(t[0], s0);
                   kernels::sum_of_squares(t[1], s1);
                   Tensor own = t[1].clone(), global = t[0].clone(), value = t[0].clone();
                   kernels::clip_by_norm(own, s1, 1.0f);
                   kernels::clip_by_norm(global, squares, 1.0f);
                   kernels::clip_by_value(value, 0.5f);
                   return Tensors{squares, own, global, value};
                 }});
  return out;
}

// The transformer's ops: gelu (both forms), layer norm, the embedding's gather
// and scatter-add, attention forward and backward (causal or not, with dropout
// on the weights, one head and several, a sequence longer than a block) on both
// GPU paths: cuBLASLt's batched products and the row kernels.
std::vector<OpCase> sequence_cases() {
  std::vector<OpCase> out;
  for (Activation act : {Activation::kGelu, Activation::kGeluTanh})
    out.push_back({"gelu " + std::to_string(static_cast<int>(act)), {{37, 70}, {37, 70}}, [=](Tensors& t) {
                     Tensor y = on(t[0], t[0].shape()), dx = on(t[0], t[0].shape());
                     kernels::activation_forward(act, t[0], y);
                     kernels::activation_backward_from_input(act, t[0], t[1], dx);
                     return Tensors{y, dx};
                   },
                   1e-5, 1e-4, -4.0, 4.0});
  for (const bool affine : {true, false})
    out.push_back({std::string("layer_norm") + (affine ? " gamma beta" : " plain"), {{3, 41, 96}, {96}, {96}, {3, 41, 96}},
                   [=](Tensors& t) {
                     const int64_t rows = 3 * 41;
                     Tensor y = on(t[0], t[0].shape()), mean = on(t[0], {rows}), rstd = on(t[0], {rows});
                     kernels::layer_norm_forward(t[0], affine ? &t[1] : nullptr, affine ? &t[2] : nullptr, 1e-5f, y,
                                                 mean, rstd);
                     Tensor dx = on(t[0], t[0].shape()), dg = on(t[0], {96}), db = on(t[0], {96});
                     kernels::layer_norm_backward(t[0], t[3], affine ? &t[1] : nullptr, mean, rstd, dx,
                                                  affine ? &dg : nullptr, affine ? &db : nullptr);
                     return affine ? Tensors{y, mean, rstd, dx, dg, db} : Tensors{y, mean, rstd, dx};
                   },
                   1e-4, 1e-4, -2.0, 2.0});
  out.push_back({"embedding gather and scatter-add (repeated ids)", {{6, 50}, {300, 32}, {6, 50, 32}}, [](Tensors& t) {
                   // Ids in [0, 300), each of the first 97 used about three times.
                   Tensor ids_host = t[0].to_host();
                   for (int64_t i = 0; i < ids_host.numel(); ++i) ids_host.data()[i] = static_cast<float>((i * 7 + 3) % 97);
                   const Tensor ids = ids_host.to(t[0].device());
                   Tensor y = on(t[0], {6, 50, 32}), dtable = on(t[0], {300, 32});
                   kernels::embedding_forward(ids, t[1], y);
                   kernels::embedding_backward(ids, t[2], dtable);
                   return Tensors{y, dtable};
                 },
                 1e-5, 1e-5});
  struct A {
    int64_t n, t, h, dk, dv;
    bool causal;
    float dropout;
  };
  for (const kernels::GpuAttention path : {kernels::GpuAttention::kMatmul, kernels::GpuAttention::kRows})
  for (const A& a : {A{2, 9, 1, 8, 8, true, 0.0f}, A{2, 128, 4, 32, 32, true, 0.0f}, A{3, 70, 2, 16, 24, false, 0.0f},
                     A{2, 64, 4, 32, 32, true, 0.25f}, A{1, 300, 2, 64, 64, true, 0.0f}}) {
    kernels::AttentionParams p;
    p.heads = a.h;
    p.scale = 1.0f / std::sqrt(static_cast<float>(a.dk));
    p.causal = a.causal;
    p.dropout = a.dropout;
    p.seed = 77;
    const Shape qs{a.n, a.t, a.h, a.dk}, vs{a.n, a.t, a.h, a.dv};
    out.push_back({"attention (" + kernels::gpu_attention_name(path) + ") n" + std::to_string(a.n) + " t" + std::to_string(a.t) + " h" + std::to_string(a.h) +
                       " dk" + std::to_string(a.dk) + " dv" + std::to_string(a.dv) + (a.causal ? " causal" : "") +
                       (a.dropout > 0 ? " dropout" : ""),
                   {qs, qs, vs, vs},
                   [=](Tensors& t) {
                     kernels::set_gpu_attention(path);  // (the CPU's kernels are blocked either way)
                     Tensor o = on(t[0], vs), lse = on(t[0], {a.n, a.h, a.t});
                     kernels::attention_forward(t[0], t[1], t[2], p, o, lse);
                     Tensor dq = on(t[0], qs), dk = on(t[0], qs), dv = on(t[0], vs);
                     kernels::attention_backward(t[0], t[1], t[2], o, lse, t[3], p, dq, dk, dv);
                     kernels::set_gpu_attention(kernels::GpuAttention::kAuto);
                     return Tensors{o, lse, dq, dk, dv};
                   },
                   2e-4, 1e-3, -1.5, 1.5});
  }
  return out;
}

void check_case(const OpCase& c) {
  INFO("op case: " << c.name);
  Tensors cpu_in, gpu_in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    cpu_in.push_back(testing::random_tensor(c.inputs[i], 100 + i, c.lo, c.hi));
    gpu_in.push_back(cpu_in.back().to(Device::cuda(0)));
  }
  const Tensors want = c.run(cpu_in);
  const Tensors got_device = c.run(gpu_in);
  REQUIRE(want.size() == got_device.size());
  for (size_t o = 0; o < want.size(); ++o) {
    INFO("output " << o << " (got: gpu, want: cpu)");
    REQUIRE(got_device[o].device() == Device::cuda(0));
    REQUIRE(got_device[o].shape() == want[o].shape());
    testing::require_close(got_device[o], want[o], c.atol, c.rtol);
  }
}

void check_all(const std::vector<OpCase>& cases) {
  if (!testing::gpu_or_skip()) return;
  kernels::set_allow_tf32(false);
  for (const OpCase& c : cases) check_case(c);
}

}  // namespace

TEST_CASE("gpu ops: dense (cuBLASLt with epilogues) matches the CPU") { check_all(dense_cases()); }
TEST_CASE("gpu ops: convolution (cuDNN, asymmetric padding) matches the CPU") { check_all(conv_cases()); }
TEST_CASE("gpu ops: pooling (cuDNN average, own max kernels) matches the CPU, ties included") { check_all(pool_cases()); }
TEST_CASE("gpu ops: activations, batch norm, element-wise, losses and updates match the CPU") {
  check_all(other_cases());
}

TEST_CASE("gpu ops: the transformer's ops (gelu, layer norm, embedding, attention) match the CPU") {
  check_all(sequence_cases());
}

TEST_CASE("gpu tensors: copies to and from the device keep every value") {
  if (!testing::gpu_or_skip()) return;
  const Tensor host = testing::random_tensor({1000, 3}, 7, -5, 5);
  const Tensor device = host.to(Device::cuda(0));
  Tensor back = device.clone().to_host();
  for (int64_t i = 0; i < host.numel(); ++i) REQUIRE(back.data()[i] == host.data()[i]);
  Tensor filled({10}, Device::cuda(0));
  filled.fill(2.5f);
  REQUIRE(filled.to_host().data()[9] == 2.5f);
}

TEST_CASE("gpu ops: an argument on another device, an optional one too, is an error naming the op") {
  if (!testing::gpu_or_skip()) return;
  const Device gpu = Device::cuda(0);
  const Tensor x = testing::random_tensor({4, 3}, 1).to(gpu), w = testing::random_tensor({3, 2}, 2).to(gpu);
  const Tensor host_bias = testing::random_tensor({2}, 3);
  Tensor y({4, 2}, gpu);
  REQUIRE_THROWS_WITH(kernels::dense_forward(x, w, &host_bias, Activation::kLinear, y),
                      Catch::Contains("dense_forward: tensors on cuda:0 and cpu:0"));
  const Tensor host_x = x.to_host();
  REQUIRE_THROWS_WITH(kernels::axpy(1.0f, host_x, y), Catch::Contains("axpy"));
}

TEST_CASE("gpu ops: an error an unchecked CUDA call left behind is not blamed on the next kernel launch") {
  if (!testing::gpu_or_skip()) return;
#if DTRAIN_HAVE_CUDA
  // As a destructor's unchecked cudaSetDevice would: a non-sticky error stays
  // in the runtime's last-error slot until someone reads it.
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  REQUIRE(cudaSetDevice(count + 5) == cudaErrorInvalidDevice);
  const Tensor host = testing::random_tensor({1000}, 9);
  const Tensor x = host.to(Device::cuda(0));
  Tensor y({1000}, Device::cuda(0));
  REQUIRE_NOTHROW(kernels::activation_forward(Activation::kRelu, x, y));  // an own kernel, checked at launch
  const Tensor back = y.to_host();
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(back.data()[i] == std::max(host.data()[i], 0.0f));
  REQUIRE(cudaGetLastError() == cudaSuccess);  // taken off by the launch check, not left for a later call
#endif
}

// Mixed precision on the GPU: bfloat16 activations and kernel copy, float32
// bias, weight gradient and accumulation, against the CPU's bfloat16 ops on the
// same inputs (each may round its bfloat16 outputs differently: one bfloat16 step).
namespace {

// x converted to `dtype` on its own device.
Tensor cast_to(const Tensor& x, DType dtype) {
  Tensor y(x.shape(), x.device(), dtype);
  kernels::cast(x, y);
  return y;
}

}  // namespace

TEST_CASE("gpu ops: dense, activations and dropout in bfloat16 match the CPU's bfloat16 ops") {
  if (!testing::gpu_or_skip()) return;
  const Device gpu = Device::cuda(0);
  const auto bf16 = [](const Tensor& x) { return cast_to(x, DType::kBF16); };
  const auto f32 = [](const Tensor& x) { return cast_to(x, DType::kF32); };
  const Tensor x = bf16(testing::random_tensor({64, 300}, 41)), w = bf16(testing::random_tensor({300, 70}, 42));
  const Tensor b = testing::random_tensor({70}, 43), dy = bf16(testing::random_tensor({64, 70}, 44));
  for (Activation act : {Activation::kLinear, Activation::kRelu, Activation::kTanh}) {
    CAPTURE(static_cast<int>(act));
    Tensor cpu_y({64, 70}, Device::cpu(), DType::kBF16), gpu_y({64, 70}, gpu, DType::kBF16);
    const Tensor gpu_b = b.to(gpu);
    kernels::dense_forward(x, w, &b, act, cpu_y);
    kernels::dense_forward(x.to(gpu), w.to(gpu), &gpu_b, act, gpu_y);
    testing::require_close(f32(gpu_y.to_host()), f32(cpu_y), 2e-2, 1.0 / 64);
  }
  Tensor cpu_dx({64, 300}, Device::cpu(), DType::kBF16), gpu_dx({64, 300}, gpu, DType::kBF16);
  kernels::dense_backward_data(dy, w, cpu_dx);
  kernels::dense_backward_data(dy.to(gpu), w.to(gpu), gpu_dx);
  testing::require_close(f32(gpu_dx.to_host()), f32(cpu_dx), 2e-2, 1.0 / 64);
  Tensor cpu_dw({300, 70}), cpu_db({70}), gpu_dw({300, 70}, gpu), gpu_db({70}, gpu);
  kernels::dense_backward_weights(x, dy, cpu_dw, &cpu_db);
  kernels::dense_backward_weights(x.to(gpu), dy.to(gpu), gpu_dw, &gpu_db);
  testing::require_close(gpu_dw, cpu_dw, 1e-3, 1e-3);  // float32 outputs of exact bfloat16 products
  testing::require_close(gpu_db, cpu_db, 1e-4, 1e-4);
  Tensor cpu_a({64, 70}, Device::cpu(), DType::kBF16), gpu_a({64, 70}, gpu, DType::kBF16);
  kernels::activation_forward(Activation::kSigmoid, dy, cpu_a);
  kernels::activation_forward(Activation::kSigmoid, dy.to(gpu), gpu_a);
  testing::require_close(f32(gpu_a.to_host()), f32(cpu_a), 1e-2, 1.0 / 128);
  Tensor cpu_mask({64, 70}), gpu_mask({64, 70}, gpu), cpu_d({64, 70}, Device::cpu(), DType::kBF16),
      gpu_d({64, 70}, gpu, DType::kBF16);
  kernels::dropout_forward(dy, 0.5f, 3, cpu_d, cpu_mask);
  kernels::dropout_forward(dy.to(gpu), 0.5f, 3, gpu_d, gpu_mask);
  testing::require_close(gpu_mask, cpu_mask, 0, 0);
  testing::require_close(f32(gpu_d.to_host()), f32(cpu_d), 0, 0);
}

TEST_CASE("gpu ops: dense, activations and dropout in float16 match float32 on the same values") {
  if (!testing::gpu_or_skip()) return;
  // No CPU backend computes in float16: the reference is the CPU's float32 op on
  // the float16 inputs' values; the GPU accumulates in float32 and rounds once.
  const Device gpu = Device::cuda(0);
  const auto f16 = [](const Tensor& x) { return cast_to(x, DType::kF16); };
  const auto f32 = [](const Tensor& x) { return cast_to(x, DType::kF32); };
  const Tensor x = f16(testing::random_tensor({64, 300}, 51)), w = f16(testing::random_tensor({300, 70}, 52));
  const Tensor b = testing::random_tensor({70}, 53), dy = f16(testing::random_tensor({64, 70}, 54));
  const Tensor x32 = f32(x), w32 = f32(w), dy32 = f32(dy);
  // The GPU's rounding to float16 is the CPU's (oneDNN's), overflow to infinity included.
  const Tensor r = testing::random_tensor({4096}, 55, -70000, 70000);
  const Tensor gpu_r = f16(r.to(gpu)).to_host(), cpu_r = f16(r);
  for (int64_t i = 0; i < r.numel(); ++i) {
    INFO("float32 " << r.data()[i]);
    REQUIRE(gpu_r.data_f16()[i].bits == cpu_r.data_f16()[i].bits);
  }
  for (Activation act : {Activation::kLinear, Activation::kRelu, Activation::kTanh}) {
    CAPTURE(static_cast<int>(act));
    Tensor cpu_y({64, 70}), gpu_y({64, 70}, gpu, DType::kF16);
    const Tensor gpu_b = b.to(gpu);
    kernels::dense_forward(x32, w32, &b, act, cpu_y);
    kernels::dense_forward(x.to(gpu), w.to(gpu), &gpu_b, act, gpu_y);
    testing::require_close(f32(gpu_y.to_host()), cpu_y, 5e-3, 2e-3);
  }
  Tensor cpu_dx({64, 300}), gpu_dx({64, 300}, gpu, DType::kF16);
  kernels::dense_backward_data(dy32, w32, cpu_dx);
  kernels::dense_backward_data(dy.to(gpu), w.to(gpu), gpu_dx);
  testing::require_close(f32(gpu_dx.to_host()), cpu_dx, 5e-3, 2e-3);
  Tensor cpu_dw({300, 70}), cpu_db({70}), gpu_dw({300, 70}, gpu), gpu_db({70}, gpu);
  kernels::dense_backward_weights(x32, dy32, cpu_dw, &cpu_db);
  kernels::dense_backward_weights(x.to(gpu), dy.to(gpu), gpu_dw, &gpu_db);
  testing::require_close(gpu_dw, cpu_dw, 1e-3, 1e-3);  // float32 outputs of exact float16 products
  testing::require_close(gpu_db, cpu_db, 1e-4, 1e-4);
  Tensor cpu_a({64, 70}), gpu_a({64, 70}, gpu, DType::kF16);
  kernels::activation_forward(Activation::kSigmoid, dy32, cpu_a);
  kernels::activation_forward(Activation::kSigmoid, dy.to(gpu), gpu_a);
  testing::require_close(f32(gpu_a.to_host()), cpu_a, 1e-3, 1e-3);
  Tensor cpu_mask({64, 70}), gpu_mask({64, 70}, gpu), cpu_d({64, 70}), gpu_d({64, 70}, gpu, DType::kF16);
  kernels::dropout_forward(dy32, 0.5f, 3, cpu_d, cpu_mask);
  kernels::dropout_forward(dy.to(gpu), 0.5f, 3, gpu_d, gpu_mask);
  testing::require_close(gpu_mask, cpu_mask, 0, 0);
  testing::require_close(f32(gpu_d.to_host()), cpu_d, 0, 0);  // x * 2 is exact in float16 here
}

TEST_CASE("gpu ops: convolution and pooling in bfloat16 and float16 match float32 on the same values") {
  if (!testing::gpu_or_skip()) return;
  // The CPU's float32 ops on the 16-bit inputs' values are the reference; cuDNN
  // accumulates in float32 and rounds the outputs once (the weight gradient and
  // the bias gradient come out in float32, from 16-bit products).
  const Device gpu = Device::cuda(0);
  const auto f32 = [](const Tensor& x) { return cast_to(x, DType::kF32); };
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    CAPTURE(dtype_name(dtype));
    const double tol = dtype == DType::kBF16 ? 1.0 / 64 : 2e-3;  // half a step of the type, and the sums' rounding
    const auto low = [dtype](const Tensor& x) { return cast_to(x, dtype); };
    const Tensor x = low(testing::random_tensor({4, 9, 9, 6}, 61)), w = low(testing::random_tensor({3, 3, 6, 8}, 62));
    const Tensor b = testing::random_tensor({8}, 63);
    const Tensor x32 = f32(x), w32 = f32(w);
    // Symmetric padding, and an asymmetric one (stride 2: padded explicitly).
    for (const int64_t stride : {1, 2}) {
      CAPTURE(stride);
      kernels::Conv2DParams p;
      p.stride[0] = p.stride[1] = stride;
      p.pad_before[0] = p.pad_before[1] = stride == 1 ? 1 : 0;
      p.pad_after[0] = p.pad_after[1] = 1;
      const int64_t o = (9 + p.pad_before[0] + p.pad_after[0] - 3) / stride + 1;
      const Tensor dy = low(testing::random_tensor({4, o, o, 8}, 64)), dy32 = f32(dy);
      Tensor cpu_y({4, o, o, 8}), gpu_y({4, o, o, 8}, gpu, dtype);
      const Tensor gpu_b = b.to(gpu);
      kernels::conv2d_forward(x32, w32, &b, p, Activation::kRelu, cpu_y);
      kernels::conv2d_forward(x.to(gpu), w.to(gpu), &gpu_b, p, Activation::kRelu, gpu_y);
      testing::require_close(f32(gpu_y.to_host()), cpu_y, tol, tol);
      Tensor cpu_dx({4, 9, 9, 6}), gpu_dx({4, 9, 9, 6}, gpu, dtype);
      kernels::conv2d_backward_data(dy32, w32, p, cpu_dx);
      kernels::conv2d_backward_data(dy.to(gpu), w.to(gpu), p, gpu_dx);
      testing::require_close(f32(gpu_dx.to_host()), cpu_dx, tol, tol);
      Tensor cpu_dw({3, 3, 6, 8}), cpu_db({8}), gpu_dw({3, 3, 6, 8}, gpu), gpu_db({8}, gpu);
      kernels::conv2d_backward_weights(x32, dy32, p, cpu_dw, &cpu_db);
      kernels::conv2d_backward_weights(x.to(gpu), dy.to(gpu), p, gpu_dw, &gpu_db);
      testing::require_close(gpu_dw, cpu_dw, 4 * tol, tol);  // sums of 4*o*o products, rounded to the type once
      testing::require_close(gpu_db, cpu_db, 1e-4, 1e-4);
    }
    // Max (own kernels) and average (cuDNN) pooling, and average with "same"
    // padding that cuDNN cannot express (own kernels).
    for (const auto kind : {kernels::PoolKind::kMax, kernels::PoolKind::kAverage}) {
      for (const int64_t after : {0, 1}) {
        CAPTURE(static_cast<int>(kind), after);
        kernels::Pool2DParams p;
        p.kind = kind;
        p.pad_after[0] = p.pad_after[1] = after;
        const int64_t o = (9 + after - 2) / 2 + 1;
        Tensor cpu_y({4, o, o, 6}), gpu_y({4, o, o, 6}, gpu, dtype);
        kernels::Workspace cpu_ws, gpu_ws;
        kernels::pool2d_forward(x32, p, cpu_y, &cpu_ws);
        const Tensor gx = x.to(gpu);
        kernels::pool2d_forward(gx, p, gpu_y, &gpu_ws);
        testing::require_close(f32(gpu_y.to_host()), cpu_y, tol, tol);
        const Tensor dy = low(testing::random_tensor({4, o, o, 6}, 65));
        Tensor cpu_dx({4, 9, 9, 6}), gpu_dx({4, 9, 9, 6}, gpu, dtype);
        kernels::pool2d_backward(f32(dy), p, &cpu_ws, cpu_dx);
        kernels::pool2d_backward(dy.to(gpu), p, &gpu_ws, gpu_dx);
        testing::require_close(f32(gpu_dx.to_host()), cpu_dx, tol, tol);
      }
    }
  }
}
