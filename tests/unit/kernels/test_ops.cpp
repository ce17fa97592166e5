// Every CPU op checked against a plain reference loop written here, for several
// shapes (valid/same padding, strides, odd sizes), with |got - want| <= atol + rtol*|want|.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "unit/tensor_checks.h"

using namespace dtrain;
using kernels::Activation;
using testing::random_tensor;
using testing::require_close;

namespace {


// Reference convolution pieces over NHWC / HWIO, with explicit padding.
struct ConvCase {
  int64_t n, h, w, c, kh, kw, f;
  kernels::Conv2DParams p;
  int64_t oh() const { return (h + p.pad_before[0] + p.pad_after[0] - kh) / p.stride[0] + 1; }
  int64_t ow() const { return (w + p.pad_before[1] + p.pad_after[1] - kw) / p.stride[1] + 1; }
  // Calls fn(n, oy, ox, ky, kx, ci, f, x_index, w_index, y_index) for every valid tap.
  void for_each_tap(const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t oy = 0; oy < oh(); ++oy)
        for (int64_t ox = 0; ox < ow(); ++ox)
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t iy = oy * p.stride[0] - p.pad_before[0] + ky;
              const int64_t ix = ox * p.stride[1] - p.pad_before[1] + kx;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              for (int64_t ci = 0; ci < c; ++ci)
                for (int64_t fo = 0; fo < f; ++fo)
                  fn(((b * h + iy) * w + ix) * c + ci, ((ky * kw + kx) * c + ci) * f + fo,
                     ((b * oh() + oy) * ow() + ox) * f + fo);
            }
  }
};

ConvCase conv_case(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t f, int64_t s,
                   int64_t pad_b, int64_t pad_a) {
  ConvCase cc{n, h, w, c, k, k, f, {}};
  cc.p.stride[0] = cc.p.stride[1] = s;
  cc.p.pad_before[0] = cc.p.pad_before[1] = pad_b;
  cc.p.pad_after[0] = cc.p.pad_after[1] = pad_a;
  return cc;
}

float apply_act(Activation act, float v) {
  switch (act) {
    case Activation::kRelu: return v > 0 ? v : 0;
    case Activation::kSigmoid: return 1.0f / (1.0f + std::exp(-v));
    case Activation::kTanh: return std::tanh(v);
    default: return v;
  }
}

}  // namespace

TEST_CASE("dense forward matches a reference matmul, with bias and fused activations") {
  for (Activation act : {Activation::kLinear, Activation::kRelu, Activation::kSigmoid, Activation::kTanh}) {
    for (auto [n, in, out] : {std::tuple{1, 3, 2}, {7, 13, 5}, {64, 784, 32}}) {
      const Tensor x = random_tensor({n, in}, 1), w = random_tensor({in, out}, 2), b = random_tensor({out}, 3);
      Tensor y({n, out}), want({n, out});
      kernels::dense_forward(x, w, &b, act, y);
      for (int i = 0; i < n; ++i)
        for (int o = 0; o < out; ++o) {
          double acc = b.data()[o];
          for (int k = 0; k < in; ++k) acc += double(x.data()[i * in + k]) * w.data()[k * out + o];
          want.data()[i * out + o] = apply_act(act, static_cast<float>(acc));
        }
      require_close(y, want);
    }
  }
}

TEST_CASE("dense backward gives dx = dy w^T, dw = x^T dy and db = column sums") {
  const int n = 9, in = 11, out = 6;
  const Tensor x = random_tensor({n, in}, 4), w = random_tensor({in, out}, 5), dy = random_tensor({n, out}, 6);
  Tensor dx({n, in}), dw({in, out}), db({out});
  kernels::dense_backward_data(dy, w, dx);
  kernels::dense_backward_weights(x, dy, dw, &db);
  Tensor want_dx({n, in}), want_dw({in, out}), want_db({out});
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < in; ++k)
      for (int o = 0; o < out; ++o) {
        want_dx.data()[i * in + k] += dy.data()[i * out + o] * w.data()[k * out + o];
        want_dw.data()[k * out + o] += x.data()[i * in + k] * dy.data()[i * out + o];
      }
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) want_db.data()[o] += dy.data()[i * out + o];
  require_close(dx, want_dx);
  require_close(dw, want_dw);
  require_close(db, want_db);
}

TEST_CASE("conv2d forward and both backward passes match reference loops") {
  // (n, h, w, c, k, f, stride, pad_before, pad_after): valid, same, strided, asymmetric.
  const ConvCase cases[] = {conv_case(2, 6, 6, 1, 3, 4, 1, 0, 0), conv_case(3, 7, 5, 3, 3, 5, 1, 1, 1),
                            conv_case(2, 9, 9, 2, 3, 3, 2, 0, 0), conv_case(1, 8, 8, 4, 2, 6, 2, 0, 1)};
  uint64_t seed = 10;
  for (const ConvCase& cc : cases) {
    const Tensor x = random_tensor({cc.n, cc.h, cc.w, cc.c}, ++seed);
    const Tensor w = random_tensor({cc.kh, cc.kw, cc.c, cc.f}, ++seed);
    const Tensor b = random_tensor({cc.f}, ++seed);
    const Tensor dy = random_tensor({cc.n, cc.oh(), cc.ow(), cc.f}, ++seed);
    Tensor y({cc.n, cc.oh(), cc.ow(), cc.f}), want_y({cc.n, cc.oh(), cc.ow(), cc.f});
    Tensor dx({cc.n, cc.h, cc.w, cc.c}), want_dx({cc.n, cc.h, cc.w, cc.c});
    Tensor dw({cc.kh, cc.kw, cc.c, cc.f}), want_dw({cc.kh, cc.kw, cc.c, cc.f});
    Tensor db({cc.f}), want_db({cc.f});
    kernels::conv2d_forward(x, w, &b, cc.p, Activation::kRelu, y);
    kernels::conv2d_backward_data(dy, w, cc.p, dx);
    kernels::conv2d_backward_weights(x, dy, cc.p, dw, &db);

    cc.for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) {
      want_y.data()[yi] += x.data()[xi] * w.data()[wi];
      want_dx.data()[xi] += dy.data()[yi] * w.data()[wi];
      want_dw.data()[wi] += x.data()[xi] * dy.data()[yi];
    });
    for (int64_t i = 0; i < want_y.numel(); ++i) {
      const int64_t f = i % cc.f;
      want_y.data()[i] = apply_act(Activation::kRelu, want_y.data()[i] + b.data()[f]);
      want_db.data()[f] += dy.data()[i];
    }
    require_close(y, want_y);
    require_close(dx, want_dx);
    require_close(dw, want_dw, 1e-3);
    require_close(db, want_db, 1e-3);
  }
}

TEST_CASE("max pooling forward picks maxima and backward routes gradients to them") {
  const Tensor x = random_tensor({2, 5, 5, 3}, 30);
  kernels::Pool2DParams p;  // 2x2, stride 2, valid: 5 -> 2
  Tensor y({2, 2, 2, 3}), dy = random_tensor({2, 2, 2, 3}, 31), dx({2, 5, 5, 3});
  kernels::Workspace ws;
  kernels::pool2d_forward(x, p, y, &ws);
  kernels::pool2d_backward(dy, p, &ws, dx);
  Tensor want_y({2, 2, 2, 3}), want_dx({2, 5, 5, 3});
  for (int b = 0; b < 2; ++b)
    for (int oy = 0; oy < 2; ++oy)
      for (int ox = 0; ox < 2; ++ox)
        for (int c = 0; c < 3; ++c) {
          int64_t best = -1;
          for (int ky = 0; ky < 2; ++ky)
            for (int kx = 0; kx < 2; ++kx) {
              const int64_t xi = ((b * 5 + oy * 2 + ky) * 5 + ox * 2 + kx) * 3 + c;
              if (best < 0 || x.data()[xi] > x.data()[best]) best = xi;
            }
          const int64_t yi = ((b * 2 + oy) * 2 + ox) * 3 + c;
          want_y.data()[yi] = x.data()[best];
          want_dx.data()[best] += dy.data()[yi];
        }
  require_close(y, want_y, 0, 0);
  require_close(dx, want_dx);
}

TEST_CASE("max pooling with padding, overlapping windows and ties matches a reference loop") {
  // (n, h, w, c, kh, kw, sh, sw, pad top, left, bottom, right): Keras "same" 3x3/2,
  // overlapping 3x3/1 (backward accumulates), asymmetric, and a 17x17 window (more
  // than 256 taps). Inputs come in coarse steps so windows hold tied maxima.
  struct Case { int64_t n, h, w, c, kh, kw, sh, sw, pt, pl, pb, pr; };
  const Case cases[] = {{2, 7, 7, 3, 3, 3, 2, 2, 1, 1, 1, 1}, {3, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1},
                        {1, 6, 5, 17, 3, 2, 2, 1, 0, 1, 1, 0}, {2, 18, 18, 2, 17, 17, 1, 1, 0, 0, 0, 0},
                        {1, 4, 4, 5, 2, 2, 1, 1, 0, 0, 1, 1}};
  const int saved_threads = kernels::num_threads();
  uint64_t seed = 80;
  for (const Case& k : cases) {
    kernels::Pool2DParams p;
    p.kernel[0] = k.kh, p.kernel[1] = k.kw, p.stride[0] = k.sh, p.stride[1] = k.sw;
    p.pad_before[0] = k.pt, p.pad_before[1] = k.pl, p.pad_after[0] = k.pb, p.pad_after[1] = k.pr;
    const int64_t oh = (k.h + k.pt + k.pb - k.kh) / k.sh + 1, ow = (k.w + k.pl + k.pr - k.kw) / k.sw + 1;
    Tensor x = random_tensor({k.n, k.h, k.w, k.c}, ++seed);
    for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = std::round(x.data()[i] * 3.0f);
    const Tensor dy = random_tensor({k.n, oh, ow, k.c}, ++seed);
    Tensor want_y({k.n, oh, ow, k.c}), want_dx({k.n, k.h, k.w, k.c});
    for (int64_t b = 0; b < k.n; ++b)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t c = 0; c < k.c; ++c) {
            int64_t best = -1;  // padding is -inf: only real positions compete
            for (int64_t ky = 0; ky < k.kh; ++ky)
              for (int64_t kx = 0; kx < k.kw; ++kx) {
                const int64_t iy = oy * k.sh - k.pt + ky, ix = ox * k.sw - k.pl + kx;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                const int64_t xi = ((b * k.h + iy) * k.w + ix) * k.c + c;
                if (best < 0 || x.data()[xi] > x.data()[best]) best = xi;  // ties: first in window
              }
            const int64_t yi = ((b * oh + oy) * ow + ox) * k.c + c;
            want_y.data()[yi] = x.data()[best];
            want_dx.data()[best] += dy.data()[yi];
          }
    // One thread and several (more threads than samples splits the channels).
    for (int threads : {1, 4}) {
      kernels::set_num_threads(threads);
      Tensor y({k.n, oh, ow, k.c}), y_infer({k.n, oh, ow, k.c}), dx({k.n, k.h, k.w, k.c});
      dx.fill(7.0f);  // backward must overwrite, not add to, what dx held
      kernels::Workspace ws;
      kernels::pool2d_forward(x, p, y, &ws);
      kernels::pool2d_forward(x, p, y_infer, nullptr);
      kernels::pool2d_backward(dy, p, &ws, dx);
      require_close(y, want_y, 0, 0);
      require_close(y_infer, want_y, 0, 0);
      require_close(dx, want_dx, 1e-6, 1e-6);
    }
  }
  kernels::set_num_threads(saved_threads);
}

TEST_CASE("average pooling with same padding excludes the padding from the count") {
  // 3x3 input, 2x2 window, stride 2, same padding: output 2x2, bottom/right padded by 1.
  Tensor x({1, 3, 3, 1});
  for (int i = 0; i < 9; ++i) x.data()[i] = static_cast<float>(i + 1);
  kernels::Pool2DParams p;
  p.kind = kernels::PoolKind::kAverage;
  p.pad_after[0] = p.pad_after[1] = 1;
  Tensor y({1, 2, 2, 1});
  kernels::Workspace ws;
  kernels::pool2d_forward(x, p, y, &ws);
  // windows: {1,2,4,5} {3,6} {7,8} {9}
  CHECK(y.data()[0] == Approx(3.0));
  CHECK(y.data()[1] == Approx(4.5));
  CHECK(y.data()[2] == Approx(7.5));
  CHECK(y.data()[3] == Approx(9.0));
  Tensor dy({1, 2, 2, 1}), dx({1, 3, 3, 1});
  dy.fill(1.0f);
  kernels::pool2d_backward(dy, p, &ws, dx);
  CHECK(dx.data()[0] == Approx(0.25));  // shared by 4
  CHECK(dx.data()[2] == Approx(0.5));   // shared by 2
  CHECK(dx.data()[8] == Approx(1.0));   // alone
}

TEST_CASE("activations forward and backward (from the output) match their formulas") {
  const Tensor x = random_tensor({4, 7}, 40, -3, 3), dy = random_tensor({4, 7}, 41);
  for (Activation act : {Activation::kRelu, Activation::kSigmoid, Activation::kTanh, Activation::kLinear}) {
    Tensor y({4, 7}), dx({4, 7}), want_dx({4, 7});
    kernels::activation_forward(act, x, y);
    kernels::activation_backward(act, y, dy, dx);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float v = x.data()[i], out = apply_act(act, v);
      REQUIRE(y.data()[i] == Approx(out).margin(1e-6));
      float d = 1.0f;
      if (act == Activation::kRelu) d = v > 0 ? 1.0f : 0.0f;
      if (act == Activation::kSigmoid) d = out * (1 - out);
      if (act == Activation::kTanh) d = 1 - out * out;
      want_dx.data()[i] = d * dy.data()[i];
    }
    require_close(dx, want_dx, 1e-5);
  }
}

TEST_CASE("softmax over the last axis and its backward") {
  const Tensor x = random_tensor({3, 5}, 50, -4, 4), dy = random_tensor({3, 5}, 51);
  Tensor y({3, 5}), dx({3, 5}), want_y({3, 5}), want_dx({3, 5});
  kernels::activation_forward(Activation::kSoftmax, x, y);
  kernels::activation_backward(Activation::kSoftmax, y, dy, dx);
  for (int r = 0; r < 3; ++r) {
    double sum = 0, dot = 0;
    for (int j = 0; j < 5; ++j) sum += std::exp(x.data()[r * 5 + j]);
    for (int j = 0; j < 5; ++j) want_y.data()[r * 5 + j] = static_cast<float>(std::exp(x.data()[r * 5 + j]) / sum);
    for (int j = 0; j < 5; ++j) dot += want_y.data()[r * 5 + j] * dy.data()[r * 5 + j];
    for (int j = 0; j < 5; ++j)
      want_dx.data()[r * 5 + j] = static_cast<float>(want_y.data()[r * 5 + j] * (dy.data()[r * 5 + j] - dot));
  }
  require_close(y, want_y, 1e-6);
  require_close(dx, want_dx, 1e-5);
}

TEST_CASE("batch norm training normalises per channel and inference uses given statistics") {
  const int64_t n = 4, h = 3, w = 3, c = 2;
  const Tensor x = random_tensor({n, h, w, c}, 60, -2, 5), gamma = random_tensor({c}, 61, 0.5, 2),
               beta = random_tensor({c}, 62);
  Tensor y({n, h, w, c}), mean({c}), var({c});
  kernels::batch_norm_forward_training(x, gamma, beta, 1e-3f, y, mean, var);
  const int64_t m = n * h * w;
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, ss = 0;
    for (int64_t i = 0; i < m; ++i) s += x.data()[i * c + ch];
    const double mu = s / m;
    for (int64_t i = 0; i < m; ++i) ss += std::pow(x.data()[i * c + ch] - mu, 2);
    const double v = ss / m;
    CHECK(mean.data()[ch] == Approx(mu).margin(1e-5));
    CHECK(var.data()[ch] == Approx(v).epsilon(1e-4));
    for (int64_t i = 0; i < m; ++i) {
      const double want = gamma.data()[ch] * (x.data()[i * c + ch] - mu) / std::sqrt(v + 1e-3) + beta.data()[ch];
      REQUIRE(y.data()[i * c + ch] == Approx(want).margin(1e-4));
    }
  }
  Tensor y2({n, h, w, c});
  kernels::batch_norm_forward_inference(x, gamma, beta, mean, var, 1e-3f, y2);
  require_close(y2, y, 1e-4);
}

TEST_CASE("batch norm backward matches a finite-difference gradient") {
  const int64_t n = 6, c = 3;
  const Tensor x = random_tensor({n, c}, 70, -1, 2), gamma = random_tensor({c}, 71, 0.5, 1.5),
               beta = random_tensor({c}, 72), dy = random_tensor({n, c}, 73);
  Tensor y({n, c}), mean({c}), var({c}), dx({n, c}), dgamma({c}), dbeta({c});
  kernels::batch_norm_forward_training(x, gamma, beta, 1e-3f, y, mean, var);
  kernels::batch_norm_backward(x, dy, gamma, mean, var, 1e-3f, dx, dgamma, dbeta);
  // L = sum(y * dy); perturb each x and compare dL/dx.
  auto loss = [&](const Tensor& xx) {
    Tensor yy({n, c}), mm({c}), vv({c});
    kernels::batch_norm_forward_training(xx, gamma, beta, 1e-3f, yy, mm, vv);
    double l = 0;
    for (int64_t i = 0; i < yy.numel(); ++i) l += double(yy.data()[i]) * dy.data()[i];
    return l;
  };
  for (int64_t i = 0; i < x.numel(); ++i) {
    Tensor xp = x.clone(), xm = x.clone();
    xp.data()[i] += 1e-2f;
    xm.data()[i] -= 1e-2f;
    const double numeric = (loss(xp) - loss(xm)) / 2e-2;
    REQUIRE(dx.data()[i] == Approx(numeric).margin(2e-3).epsilon(2e-2));
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum_dy = 0;
    for (int64_t i = 0; i < n; ++i) sum_dy += dy.data()[i * c + ch];
    CHECK(dbeta.data()[ch] == Approx(sum_dy).margin(1e-5));
  }
}

TEST_CASE("dropout keeps about 1-rate of the values, scales them, and repeats for the same seed") {
  Tensor x({1000, 100});
  x.fill(1.0f);
  Tensor y({1000, 100}), mask({1000, 100}), y2({1000, 100}), mask2({1000, 100});
  kernels::dropout_forward(x, 0.25f, 42, y, mask);
  int64_t kept = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    REQUIRE((y.data()[i] == 0.0f || y.data()[i] == Approx(1.0f / 0.75f)));
    kept += y.data()[i] != 0.0f;
  }
  CHECK(kept / 100000.0 == Approx(0.75).margin(0.01));
  kernels::dropout_forward(x, 0.25f, 42, y2, mask2);
  REQUIRE(std::equal(y.data(), y.data() + y.numel(), y2.data()));
  kernels::dropout_forward(x, 0.25f, 43, y2, mask2);
  CHECK_FALSE(std::equal(y.data(), y.data() + y.numel(), y2.data()));
}

TEST_CASE("cuda tensors cannot be made before a GPU is selected") {
  // No backend registered its memory for cuda: a clear ConfigError, not a crash.
  REQUIRE_THROWS_WITH(Tensor({2, 2}, Device::cuda(0)), Catch::Contains("no backend serves cuda tensors"));
  REQUIRE_THROWS_AS(Tensor({2, 2}, Device::cuda(0)), ConfigError);
}
