// The bodies of the own CUDA kernels (kernels/cuda/bodies.h), run on the host
// over every index exactly as the GPU's grid-stride loop runs them, checked
// against the CPU backend (oneDNN and own loops). This checks the kernels'
// indexing and formulas on every machine; tests/gpu checks the real launches.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "kernels/cuda/bodies.h"
#include "kernels/ops.h"
#include "unit/kernels/run_on_host.h"
#include "unit/tensor_checks.h"

using namespace dtrain;
using namespace dtrain::kernels::cuda;
using kernels::Activation;
using testing::random_tensor;
using testing::require_close;
using testing::run_on_host;

namespace {



// The two passes of column_sums on the host, with the GPU's chunking.
template <class Value>
void host_column_sums(const Value& value, int64_t rows, int64_t cols, float scale, float* out) {
  const int64_t chunk_rows = column_chunk_rows(rows, cols);
  const int64_t chunks = std::max<int64_t>(1, (rows + chunk_rows - 1) / chunk_rows);
  std::vector<float> partial(static_cast<size_t>(chunks * cols));
  run_on_host(ColumnChunkSumBody<Value>{value, rows, cols, chunk_rows, partial.data()}, chunks * cols);
  run_on_host(ColumnFinishBody{partial.data(), chunks, cols, scale, out}, cols);
}

}  // namespace

TEST_CASE("kernel bodies: point-wise activations match the CPU backend") {
  for (Activation act : {Activation::kRelu, Activation::kSigmoid, Activation::kTanh, Activation::kLinear}) {
    CAPTURE(static_cast<int>(act));
    const Tensor x = random_tensor({7, 13}, 1, -3, 3), dy = random_tensor({7, 13}, 2);
    Tensor want_y({7, 13}), got_y({7, 13}), want_dx({7, 13}), got_dx({7, 13});
    kernels::activation_forward(act, x, want_y);
    run_on_host(ActivationForwardBody{x.data(), got_y.data(), act}, x.numel());
    require_close(got_y, want_y);
    kernels::activation_backward(act, want_y, dy, want_dx);
    run_on_host(ActivationBackwardBody{want_y.data(), dy.data(), got_dx.data(), act}, x.numel());
    require_close(got_dx, want_dx);
  }
}

TEST_CASE("kernel bodies: softmax rows and their gradient match the CPU backend") {
  const Tensor x = random_tensor({5, 11}, 3, -4, 4), dy = random_tensor({5, 11}, 4);
  Tensor want_y({5, 11}), got_y({5, 11}), want_dx({5, 11}), got_dx({5, 11});
  kernels::activation_forward(Activation::kSoftmax, x, want_y);
  run_on_host(SoftmaxRowsBody{x.data(), got_y.data(), 11}, 5);
  require_close(got_y, want_y);
  kernels::activation_backward(Activation::kSoftmax, want_y, dy, want_dx);
  run_on_host(SoftmaxBackwardRowsBody{want_y.data(), dy.data(), got_dx.data(), 11}, 5);
  require_close(got_dx, want_dx);
}

TEST_CASE("kernel bodies: bias plus activation is the dense layer's epilogue") {
  // dense_forward with bias and relu on the CPU == plain product, then the body.
  const Tensor x = random_tensor({6, 9}, 5), w = random_tensor({9, 4}, 6), b = random_tensor({4}, 7);
  Tensor want({6, 4}), got({6, 4});
  kernels::dense_forward(x, w, &b, Activation::kRelu, want);
  kernels::dense_forward(x, w, nullptr, Activation::kLinear, got);
  run_on_host(BiasActivationBody{got.data(), b.data(), 4, Activation::kRelu}, got.numel());
  require_close(got, want);
}

TEST_CASE("kernel bodies: column sums give the CPU's bias gradient for any chunking") {
  for (int64_t rows : {1, 17, 1000, 70000}) {
    CAPTURE(rows);
    const int64_t cols = rows > 1000 ? 3 : 37;
    const Tensor x = random_tensor({rows, 5}, 8), dy = random_tensor({rows, cols}, 9);
    Tensor dw({5, cols}), want({cols}), got({cols});
    kernels::dense_backward_weights(x, dy, dw, &want);
    host_column_sums(ElementValue{dy.data(), cols}, rows, cols, 1.0f, got.data());
    require_close(got, want, 1e-3, 1e-4);
  }
}

TEST_CASE("kernel bodies: batch normalization forward and backward match the CPU backend") {
  for (const Shape& shape : {Shape{64, 6}, Shape{4, 5, 5, 3}}) {
    const int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
    const Tensor x = random_tensor(shape, 10, -2, 3), dy = random_tensor(shape, 11);
    const Tensor gamma = random_tensor({cols}, 12, 0.5, 1.5), beta = random_tensor({cols}, 13);
    const float eps = 1e-3f;
    Tensor want_y(shape), mean({cols}), var({cols});
    kernels::batch_norm_forward_training(x, gamma, beta, eps, want_y, mean, var);

    Tensor got_mean({cols}), got_var({cols}), got_y(shape);
    host_column_sums(ElementValue{x.data(), cols}, rows, cols, 1.0f / rows, got_mean.data());
    host_column_sums(CenteredSquareValue{x.data(), got_mean.data(), cols}, rows, cols, 1.0f / rows, got_var.data());
    require_close(got_mean, mean);
    require_close(got_var, var);
    run_on_host(BatchNormApplyBody{x.data(), got_y.data(), mean.data(), var.data(), gamma.data(), beta.data(), eps,
                                   cols},
                x.numel());
    require_close(got_y, want_y, 1e-4, 1e-4);

    Tensor want_dx(shape), want_dgamma({cols}), want_dbeta({cols});
    kernels::batch_norm_backward(x, dy, gamma, mean, var, eps, want_dx, want_dgamma, want_dbeta);
    Tensor dbeta({cols}), dxc({cols}), dgamma({cols}), dx(shape);
    host_column_sums(ElementValue{dy.data(), cols}, rows, cols, 1.0f, dbeta.data());
    host_column_sums(CenteredProductValue{dy.data(), x.data(), mean.data(), cols}, rows, cols, 1.0f, dxc.data());
    run_on_host(BatchNormGammaGradBody{dxc.data(), var.data(), eps, dgamma.data()}, cols);
    run_on_host(BatchNormBackwardBody{x.data(), dy.data(), mean.data(), var.data(), gamma.data(), dbeta.data(),
                                      dxc.data(), eps, cols, rows, dx.data()},
                x.numel());
    require_close(dbeta, want_dbeta, 1e-4, 1e-4);
    require_close(dgamma, want_dgamma, 1e-4, 1e-4);
    require_close(dx, want_dx, 1e-4, 1e-3);
  }
}

TEST_CASE("kernel bodies: dropout draws the CPU backend's mask exactly") {
  const Tensor x = random_tensor({3, 50}, 14);
  Tensor want_y({3, 50}), want_mask({3, 50}), got_y({3, 50}), got_mask({3, 50});
  kernels::dropout_forward(x, 0.3f, 99, want_y, want_mask);
  run_on_host(DropoutBody{x.data(), got_y.data(), got_mask.data(), 0.3f, 99}, x.numel());
  require_close(got_mask, want_mask, 0, 0);
  require_close(got_y, want_y, 0, 0);
}

TEST_CASE("kernel bodies: adam and sgd steps are the CPU updates bit for bit") {
  const Tensor g = random_tensor({1000}, 15);
  Tensor w1 = random_tensor({1000}, 16), m1({1000}), v1({1000});
  Tensor w2 = w1.clone(), m2({1000}), v2({1000});
  kernels::AdamCoeffs k;
  k.alpha = 0.01f;
  k.decay = 0.001f;
  for (int step = 0; step < 3; ++step) {
    kernels::adam_update(w1, g, m1, v1, k);
    run_on_host(AdamBody{w2.data(), g.data(), m2.data(), v2.data(), k}, w2.numel());
  }
  require_close(w2, w1, 0, 0);
  require_close(v2, v1, 0, 0);
  kernels::SgdCoeffs s;
  s.lr = 0.1f;
  s.momentum = 0.9f;
  s.nesterov = true;
  Tensor vel1({1000}), vel2({1000});
  kernels::sgd_update(w1, g, &vel1, s);
  run_on_host(SgdBody{w2.data(), g.data(), vel2.data(), s}, w2.numel());
  require_close(w2, w1, 0, 0);
}

TEST_CASE("kernel bodies: rmsprop (every variant) and adagrad steps are the CPU updates bit for bit") {
  const Tensor g = random_tensor({1000}, 21);
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    kernels::RmspropCoeffs k;
    k.lr = 0.01f;
    k.momentum = variant & 1 ? 0.9f : 0.0f;
    k.centered = (variant & 2) != 0;
    Tensor w1 = random_tensor({1000}, 22), v1({1000}), m1({1000}), a1({1000});
    Tensor w2 = w1.clone(), v2({1000}), m2({1000}), a2({1000});
    for (int step = 0; step < 3; ++step) {
      kernels::rmsprop_update(w1, g, v1, k.momentum > 0 ? &m1 : nullptr, k.centered ? &a1 : nullptr, k);
      run_on_host(RmspropBody{w2.data(), g.data(), v2.data(), k.momentum > 0 ? m2.data() : nullptr,
                              k.centered ? a2.data() : nullptr, k},
                  w2.numel());
    }
    require_close(w2, w1, 0, 0);
    require_close(v2, v1, 0, 0);
    require_close(m2, m1, 0, 0);
    require_close(a2, a1, 0, 0);
  }
  kernels::AdagradCoeffs k;
  k.lr = 0.1f;
  Tensor w1 = random_tensor({1000}, 23), acc1({1000}), w2 = w1.clone(), acc2({1000});
  acc1.fill(0.1f);
  acc2.fill(0.1f);
  for (int step = 0; step < 3; ++step) {
    kernels::adagrad_update(w1, g, acc1, k);
    run_on_host(AdagradBody{w2.data(), g.data(), acc2.data(), k}, w2.numel());
  }
  require_close(w2, w1, 0, 0);
  require_close(acc2, acc1, 0, 0);
}

TEST_CASE("kernel bodies: the sum of squares in two passes and the clipping bodies match the CPU") {
  for (int64_t n : {1, 300, 5000, 2000000}) {
    CAPTURE(n);
    const Tensor x = random_tensor({n}, 24, -2, 2);
    Tensor want({1});
    kernels::sum_of_squares(x, want);
    const int64_t parts = square_sum_parts(n);
    std::vector<float> partial(static_cast<size_t>(parts));
    float got = 0.0f;
    run_on_host(SquareSumPartBody{x.data(), n, parts, partial.data()}, parts);
    run_on_host(SumBody{partial.data(), parts, &got}, 1);
    CHECK(got == Approx(want.data()[0]).epsilon(1e-6));
  }
  // Two gradients' sums (the global norm): the CPU op and the bodies scale alike.
  const Tensor a = random_tensor({700}, 25, -1, 1), b = random_tensor({90}, 26, -1, 1);
  Tensor squares({2});
  Tensor sa = squares.flat_slice(0, 1), sb = squares.flat_slice(1, 1);
  kernels::sum_of_squares(a, sa);
  kernels::sum_of_squares(b, sb);
  Tensor want = a.clone(), got = a.clone();
  kernels::clip_by_norm(want, squares, 0.5f);
  float total = 0.0f;
  run_on_host(SumBody{squares.data(), 2, &total}, 1);
  run_on_host(ClipByNormBody{got.data(), &total, 0.5f}, got.numel());
  require_close(got, want, 0, 0);
  Tensor clipped_want = a.clone(), clipped_got = a.clone();
  kernels::clip_by_value(clipped_want, 0.3f);
  run_on_host(ClipByValueBody{clipped_got.data(), 0.3f}, clipped_got.numel());
  require_close(clipped_got, clipped_want, 0, 0);
}

TEST_CASE("kernel bodies: explicit padding turns an asymmetric convolution into an unpadded one") {
  // Keras "same" with stride 2 on an even input pads 0 before and 1 after.
  kernels::Conv2DParams same;
  same.stride[0] = same.stride[1] = 2;
  same.pad_after[0] = same.pad_after[1] = 1;
  const Tensor x = random_tensor({2, 8, 8, 3}, 17), w = random_tensor({3, 3, 3, 4}, 18);
  Tensor want({2, 4, 4, 4});
  kernels::conv2d_forward(x, w, nullptr, same, Activation::kLinear, want);

  Tensor padded({2, 9, 9, 3}), got({2, 4, 4, 4});
  run_on_host(PadBody{x.data(), padded.data(), 8, 8, 3, 9, 9, 0, 0}, padded.numel());
  kernels::Conv2DParams none;
  none.stride[0] = none.stride[1] = 2;
  kernels::conv2d_forward(padded, w, nullptr, none, Activation::kLinear, got);
  require_close(got, want);

  // And the gradient: the padded input's gradient, cropped, is dx.
  const Tensor dy = random_tensor({2, 4, 4, 4}, 19);
  Tensor want_dx({2, 8, 8, 3}), padded_dx({2, 9, 9, 3}), got_dx({2, 8, 8, 3});
  kernels::conv2d_backward_data(dy, w, same, want_dx);
  kernels::conv2d_backward_data(dy, w, none, padded_dx);
  run_on_host(CropBody{padded_dx.data(), got_dx.data(), 8, 8, 3, 9, 9, 0, 0}, got_dx.numel());
  require_close(got_dx, want_dx);
}

TEST_CASE("kernel bodies: the filter layout round trip and its element mapping") {
  const Tensor hwio = random_tensor({3, 2, 5, 4}, 20);  // (KH, KW, C, F)
  Tensor ohwi({4, 3, 2, 5}), back({3, 2, 5, 4});
  run_on_host(HwioToOhwiBody{hwio.data(), ohwi.data(), 3 * 2 * 5, 4}, hwio.numel());
  run_on_host(OhwiToHwioBody{ohwi.data(), back.data(), 3 * 2 * 5, 4}, hwio.numel());
  require_close(back, hwio, 0, 0);
  // (kh=2, kw=1, c=3, f=1) in Keras' layout is (f=1, kh=2, kw=1, c=3) in cuDNN's.
  const int64_t src = ((2 * 2 + 1) * 5 + 3) * 4 + 1, dst = ((1 * 3 + 2) * 2 + 1) * 5 + 3;
  REQUIRE(ohwi.data()[dst] == hwio.data()[src]);
}

TEST_CASE("kernel bodies: own pooling matches the CPU backend, asymmetric windows included") {
  struct Case {
    kernels::PoolKind kind;
    int64_t h, w, k, s, pad_after;
  };
  for (const Case& c : {Case{kernels::PoolKind::kMax, 6, 6, 2, 2, 0}, Case{kernels::PoolKind::kMax, 7, 5, 2, 2, 1},
                        Case{kernels::PoolKind::kMax, 7, 7, 3, 2, 0}, Case{kernels::PoolKind::kAverage, 7, 5, 2, 2, 1},
                        Case{kernels::PoolKind::kAverage, 6, 6, 3, 1, 0}}) {
    CAPTURE(static_cast<int>(c.kind), c.h, c.w, c.k, c.s, c.pad_after);
    kernels::Pool2DParams p;
    p.kind = c.kind;
    p.kernel[0] = p.kernel[1] = c.k;
    p.stride[0] = p.stride[1] = c.s;
    p.pad_after[0] = p.pad_after[1] = c.pad_after;
    const int64_t oh = (c.h + c.pad_after - c.k) / c.s + 1, ow = (c.w + c.pad_after - c.k) / c.s + 1;
    const Tensor x = random_tensor({2, c.h, c.w, 3}, 21), dy = random_tensor({2, oh, ow, 3}, 22);
    Tensor want_y({2, oh, ow, 3}), want_dx({2, c.h, c.w, 3});
    kernels::Workspace ws;
    kernels::pool2d_forward(x, p, want_y, &ws);
    kernels::pool2d_backward(dy, p, &ws, want_dx);

    const bool max = c.kind == kernels::PoolKind::kMax;
    const Geometry g{2, c.h, c.w, 3, oh, ow, c.k, c.k, c.s, c.s, 0, 0};
    Tensor y({2, oh, ow, 3}), arg({2, oh, ow, 3}), dx({2, c.h, c.w, 3});
    run_on_host(PoolForwardBody{g, max, x.data(), y.data(), arg.data()}, y.numel());
    run_on_host(PoolBackwardBody{g, max, dy.data(), arg.data(), dx.data()}, dx.numel());
    require_close(y, want_y);
    require_close(dx, want_dx);
  }
}

TEST_CASE("kernel bodies: casts between float32 and bfloat16 are the CPU's, and the non-finite flag") {
  Tensor x = random_tensor({3, 37}, 21, -1e3, 1e3);
  x.data()[5] = std::numeric_limits<float>::infinity();
  x.data()[9] = std::nanf("");
  x.data()[11] = 1.00390625f;  // halfway between two bfloat16 values: rounds to even
  Tensor want(x.shape(), Device::cpu(), DType::kBF16), got(x.shape(), Device::cpu(), DType::kBF16);
  kernels::cast(x, want);
  run_on_host(CastToBf16Body{x.data(), got.data_bf16()}, x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(got.data_bf16()[i] == want.data_bf16()[i]);
  Tensor want_back(x.shape()), got_back(x.shape());
  kernels::cast(want, want_back);
  run_on_host(CastFromBf16Body{got.data_bf16(), got_back.data()}, x.numel());
  for (int64_t i = 0; i < x.numel(); ++i)
    REQUIRE(std::memcmp(&got_back.data()[i], &want_back.data()[i], sizeof(float)) == 0);

  // The flag: set by an inf or a NaN anywhere, left alone by finite values.
  for (const float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::nanf("")}) {
    Tensor g = random_tensor({100}, 22);
    Tensor cpu_flag({1}), body_flag({1});
    cpu_flag.zero();
    body_flag.zero();
    kernels::flag_non_finite(g, cpu_flag);
    run_on_host(NonFiniteFlagBody{g.data(), body_flag.data()}, g.numel());
    CHECK(cpu_flag.data()[0] == 0.0f);
    CHECK(body_flag.data()[0] == 0.0f);
    g.data()[73] = bad;
    kernels::flag_non_finite(g, cpu_flag);
    run_on_host(NonFiniteFlagBody{g.data(), body_flag.data()}, g.numel());
    CHECK(cpu_flag.data()[0] == 1.0f);
    CHECK(body_flag.data()[0] == 1.0f);
  }
}

TEST_CASE("kernel bodies in bfloat16 (mixed precision): the CPU backend's bfloat16 ops", "[bf16]") {
  const auto bf16 = [](const Tensor& x) {
    Tensor y(x.shape(), Device::cpu(), DType::kBF16);
    kernels::cast(x, y);
    return y;
  };
  const auto same_bits = [](const Tensor& got, const Tensor& want) {
    REQUIRE(got.numel() == want.numel());
    for (int64_t i = 0; i < got.numel(); ++i) {
      INFO("element " << i << ": got " << bf16_to_f32(got.data_bf16()[i]) << ", want "
                      << bf16_to_f32(want.data_bf16()[i]));
      REQUIRE(std::abs(bf16_to_f32(got.data_bf16()[i]) - bf16_to_f32(want.data_bf16()[i])) <=
              1e-6 + std::abs(bf16_to_f32(want.data_bf16()[i])) / 128.0);
    }
  };
  const Tensor x = bf16(random_tensor({6, 21}, 31, -3, 3)), dy = bf16(random_tensor({6, 21}, 32));
  for (Activation act : {Activation::kRelu, Activation::kSigmoid, Activation::kTanh}) {
    CAPTURE(static_cast<int>(act));
    Tensor want_y = bf16(Tensor({6, 21})), got_y = bf16(Tensor({6, 21}));
    kernels::activation_forward(act, x, want_y);
    run_on_host(ActivationForwardBody{x.data_bf16(), got_y.data_bf16(), act}, x.numel());
    same_bits(got_y, want_y);
    Tensor want_dx = bf16(Tensor({6, 21})), got_dx = bf16(Tensor({6, 21}));
    kernels::activation_backward(act, want_y, dy, want_dx);
    run_on_host(ActivationBackwardBody{want_y.data_bf16(), dy.data_bf16(), got_dx.data_bf16(), act}, x.numel());
    same_bits(got_dx, want_dx);
  }
  // Dropout: the same float32 mask as the float32 op, the product rounded once.
  Tensor want_y = bf16(Tensor({6, 21})), got_y = bf16(Tensor({6, 21})), want_mask({6, 21}), got_mask({6, 21});
  kernels::dropout_forward(x, 0.25f, 5, want_y, want_mask);
  run_on_host(DropoutBody{x.data_bf16(), got_y.data_bf16(), got_mask.data(), 0.25f, 5}, x.numel());
  require_close(got_mask, want_mask, 0, 0);
  same_bits(got_y, want_y);
  Tensor want_dx = bf16(Tensor({6, 21})), got_dx = bf16(Tensor({6, 21}));
  kernels::multiply(dy, want_mask, want_dx);
  run_on_host(MultiplyBody{dy.data_bf16(), want_mask.data(), got_dx.data_bf16()}, x.numel());
  same_bits(got_dx, want_dx);
  // The bias gradient of a bfloat16 dy: float32 column sums of its values.
  float sums[21];
  host_column_sums(ElementValue{dy.data_bf16(), 21}, 6, 21, 1.0f, sums);
  for (int64_t c = 0; c < 21; ++c) {
    double want = 0.0;
    for (int64_t r = 0; r < 6; ++r) want += bf16_to_f32(dy.data_bf16()[r * 21 + c]);
    CHECK(std::abs(sums[c] - want) <= 1e-5);
  }
  // Bias and activation on a bfloat16 product (the epilogue's fallback).
  Tensor y = bf16(random_tensor({4, 5}, 33)), bias = random_tensor({5}, 34);
  Tensor expected = bf16(Tensor({4, 5}));
  for (int64_t i = 0; i < 20; ++i)
    expected.data_bf16()[i] = f32_to_bf16(std::max(0.0f, bf16_to_f32(y.data_bf16()[i]) + bias.data()[i % 5]));
  run_on_host(BiasActivationBody{y.data_bf16(), bias.data(), 5, Activation::kRelu}, 20);
  same_bits(y, expected);
}

namespace {

// Whether two floats have the same bits, or are both NaN (payloads may differ).
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

// x converted to `dtype` on the CPU (oneDNN's reorder).
Tensor cast_to(const Tensor& x, DType dtype) {
  Tensor y(x.shape(), Device::cpu(), dtype);
  kernels::cast(x, y);
  return y;
}

}  // namespace

TEST_CASE("kernel bodies: casts between float32 and float16 are oneDNN's, every float16 value included") {
  // float32 -> float16: random values over float16's whole range and beyond,
  // its subnormals, the ties of both, overflow, infinities, NaN and the zeros.
  std::vector<float> values;
  Rng rng(16);
  for (int i = 0; i < 20000; ++i) {
    const auto magnitude = static_cast<float>(std::ldexp(1.0 + rng.uniform(), static_cast<int>(rng.below(50)) - 30));  // 2^-30 .. 2^20
    values.push_back(rng.below(2) ? magnitude : -magnitude);
  }
  for (const float v : {0.0f, 65504.0f, 65519.99f, 65520.0f, 70000.0f, -1e30f, 6.103515625e-05f,
                        6.0975552e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 8.940697e-08f,
                        1.00048828125f, 1.00146484375f, 2049.0f, 2051.0f, std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(), std::nanf(""), 1e-45f})
    values.push_back(v);
  const auto n = static_cast<int64_t>(values.size());
  Tensor x({n});
  std::memcpy(x.data(), values.data(), values.size() * sizeof(float));
  Tensor want({n}, Device::cpu(), DType::kF16), got({n}, Device::cpu(), DType::kF16);
  kernels::cast(x, want);  // oneDNN's reorder
  run_on_host(CastToF16Body{x.data(), got.data_f16()}, n);
  for (int64_t i = 0; i < n; ++i) {
    INFO("float32 " << values[static_cast<size_t>(i)]);
    const bool both_nan = std::isnan(f16_to_f32(got.data_f16()[i])) && std::isnan(f16_to_f32(want.data_f16()[i]));
    if (!both_nan) REQUIRE(got.data_f16()[i].bits == want.data_f16()[i].bits);
  }
  // (oneDNN's reorders give -0 as +0, both ways; IEEE, F16C and CUDA's
  // __float2half_rn keep the sign.)
  CHECK(f32_to_f16(-0.0f).bits == 0x8000);
  CHECK(f32_to_f16(65504.0f).bits == 0x7bff);
  CHECK(f32_to_f16(65520.0f).bits == 0x7c00);  // the tie past the largest value rounds to infinity
  CHECK(f32_to_f16(5.9604645e-08f).bits == 0x0001);  // 2^-24, the smallest subnormal
  CHECK(f32_to_f16(2.9802322e-08f).bits == 0x0000);  // 2^-25: the tie rounds to even zero

  // float16 -> float32: all 65536 values, exactly (NaN stays NaN).
  Tensor every({65536}, Device::cpu(), DType::kF16);
  for (uint32_t b = 0; b < 65536; ++b) every.data_f16()[b].bits = static_cast<uint16_t>(b);
  Tensor want_back({65536}), got_back({65536});
  kernels::cast(every, want_back);
  run_on_host(CastFromF16Body{every.data_f16(), got_back.data()}, 65536);
  for (int64_t b = 0; b < 65536; ++b) {
    INFO("float16 bits " << b);
    if (b == 0x8000) {  // -0, which oneDNN gives as +0
      CHECK(std::signbit(got_back.data()[b]));
      CHECK(got_back.data()[b] == 0.0f);
      continue;
    }
    REQUIRE(same_float(got_back.data()[b], want_back.data()[b]));
    // And back: every float16 value survives the round trip (NaNs as NaN).
    const f16_bits again = f32_to_f16(got_back.data()[b]);
    if (!std::isnan(got_back.data()[b])) REQUIRE(again.bits == every.data_f16()[b].bits);
  }
}

TEST_CASE("kernel bodies in float16 (mixed_float16 on a GPU): float32 math on the float16 values, rounded once") {
  // No CPU backend computes in float16: the reference is the float32 op on the
  // same (float16-representable) values, its result rounded to float16.
  const auto f16 = [](const Tensor& x) { return cast_to(x, DType::kF16); };
  const auto f32 = [](const Tensor& x) { return cast_to(x, DType::kF32); };
  // got (float16) is want (float32) rounded to nearest: within half a float16 step.
  const auto rounded_from = [](const Tensor& got, const Tensor& want) {
    REQUIRE(got.numel() == want.numel());
    for (int64_t i = 0; i < got.numel(); ++i) {
      const float w = want.data()[i], g = f16_to_f32(got.data_f16()[i]);
      INFO("element " << i << ": got " << g << ", want " << w);
      if (g == w) continue;  // infinities too
      REQUIRE(std::abs(g - w) <= 6e-8 + std::abs(w) / 2048.0);
    }
  };
  const Tensor x = f16(random_tensor({6, 21}, 41, -3, 3)), dy = f16(random_tensor({6, 21}, 42));
  const Tensor x32 = f32(x), dy32 = f32(dy);
  for (Activation act : {Activation::kRelu, Activation::kSigmoid, Activation::kTanh}) {
    CAPTURE(static_cast<int>(act));
    Tensor want_y({6, 21}), got_y = f16(Tensor({6, 21}));
    kernels::activation_forward(act, x32, want_y);
    run_on_host(ActivationForwardBody{x.data_f16(), got_y.data_f16(), act}, x.numel());
    rounded_from(got_y, want_y);
    // The backward from the float16 y, as the GPU runs it.
    Tensor want_dx({6, 21}), got_dx = f16(Tensor({6, 21}));
    kernels::activation_backward(act, f32(got_y), dy32, want_dx);
    run_on_host(ActivationBackwardBody{got_y.data_f16(), dy.data_f16(), got_dx.data_f16(), act}, x.numel());
    rounded_from(got_dx, want_dx);
  }
  // Dropout: the float32 op's mask exactly, the product rounded once.
  Tensor want_y({6, 21}), got_y = f16(Tensor({6, 21})), want_mask({6, 21}), got_mask({6, 21});
  kernels::dropout_forward(x32, 0.25f, 5, want_y, want_mask);
  run_on_host(DropoutBody{x.data_f16(), got_y.data_f16(), got_mask.data(), 0.25f, 5}, x.numel());
  require_close(got_mask, want_mask, 0, 0);
  rounded_from(got_y, want_y);
  Tensor want_dx({6, 21}), got_dx = f16(Tensor({6, 21}));
  kernels::multiply(dy32, want_mask, want_dx);
  run_on_host(MultiplyBody{dy.data_f16(), want_mask.data(), got_dx.data_f16()}, x.numel());
  rounded_from(got_dx, want_dx);
  // The bias gradient of a float16 dy: float32 column sums of its values.
  float sums[21];
  host_column_sums(ElementValue{dy.data_f16(), 21}, 6, 21, 1.0f, sums);
  for (int64_t c = 0; c < 21; ++c) {
    double want = 0.0;
    for (int64_t r = 0; r < 6; ++r) want += dy32.data()[r * 21 + c];
    CHECK(std::abs(sums[c] - want) <= 1e-5);
  }
  // Bias and relu on a float16 product (the epilogue's fallback), and an
  // overflow: a sum past 65504 is infinity in float16, which loss scaling catches.
  Tensor y = f16(random_tensor({4, 5}, 43)), bias = random_tensor({5}, 44);
  y.data_f16()[3] = f32_to_f16(65000.0f);
  bias.data()[3] = 1000.0f;
  Tensor expected({4, 5});
  for (int64_t i = 0; i < 20; ++i)
    expected.data()[i] = std::max(0.0f, f16_to_f32(y.data_f16()[i]) + bias.data()[i % 5]);
  run_on_host(BiasActivationBody{y.data_f16(), bias.data(), 5, Activation::kRelu}, 20);
  CHECK(std::isinf(f16_to_f32(y.data_f16()[3])));
  expected.data()[3] = f16_to_f32(y.data_f16()[3]);
  rounded_from(y, expected);
}

TEST_CASE("kernel bodies in 16 bits: padding, cropping, filter layouts and pooling carry the values float32 would") {
  // The same bodies over bfloat16 / float16 elements against their float32
  // instances on the same values: the layouts move values exactly, pooling sums
  // in float32 and rounds once, max pooling picks the same first maximum.
  const auto check_type = [](auto zero, DType dtype) {
    using T = decltype(zero);
    CAPTURE(dtype_name(dtype));
    const auto low = [dtype](const Tensor& x) { return cast_to(x, dtype); };
    const auto f32 = [](const Tensor& x) { return cast_to(x, DType::kF32); };
    const auto elements = [](Tensor& t) { return static_cast<T*>(t.raw()); };
    Tensor x = low(random_tensor({2, 5, 5, 3}, 71, -2, 2));
    const Tensor x32 = f32(x);
    // Padding (1 before, 2 after) and cropping back.
    Tensor padded = low(Tensor({2, 8, 8, 3})), padded32({2, 8, 8, 3});
    run_on_host(PadBody<T>{elements(x), elements(padded), 5, 5, 3, 8, 8, 1, 1}, padded.numel());
    run_on_host(PadBody<float>{x32.data(), padded32.data(), 5, 5, 3, 8, 8, 1, 1}, padded32.numel());
    require_close(f32(padded), padded32, 0, 0);
    Tensor cropped = low(Tensor({2, 5, 5, 3}));
    run_on_host(CropBody<T>{elements(padded), elements(cropped), 5, 5, 3, 8, 8, 1, 1}, cropped.numel());
    require_close(f32(cropped), x32, 0, 0);
    // A (3, 3, 3, 2) kernel to cuDNN's layout and back into float32 (the weight gradient's way).
    Tensor w = low(random_tensor({3, 3, 3, 2}, 72)), ohwi = low(Tensor({2, 3, 3, 3})), back({3, 3, 3, 2});
    run_on_host(HwioToOhwiBody<T>{elements(w), elements(ohwi), 27, 2}, w.numel());
    run_on_host(OhwiToHwioBody<T>{elements(ohwi), back.data(), 27, 2}, w.numel());
    require_close(back, f32(w), 0, 0);
    // Pooling 2x2 stride 2 with one more row and column after (own kernels' case).
    const Geometry g{2, 5, 5, 3, 3, 3, 2, 2, 2, 2, 0, 0};
    for (const bool max : {true, false}) {
      CAPTURE(max);
      Tensor y = low(Tensor({2, 3, 3, 3})), y32({2, 3, 3, 3}), arg({2, 3, 3, 3}), arg32({2, 3, 3, 3});
      run_on_host(PoolForwardBody<T>{g, max, elements(x), elements(y), arg.data()}, y.numel());
      run_on_host(PoolForwardBody<float>{g, max, x32.data(), y32.data(), arg32.data()}, y32.numel());
      require_close(f32(y), f32(low(y32)), 0, 0);  // float32's result, rounded once
      if (max) require_close(arg, arg32, 0, 0);
      Tensor dy = low(random_tensor({2, 3, 3, 3}, 73)), dx = low(Tensor({2, 5, 5, 3})), dx32({2, 5, 5, 3});
      run_on_host(PoolBackwardBody<T>{g, max, elements(dy), arg.data(), elements(dx)}, dx.numel());
      run_on_host(PoolBackwardBody<float>{g, max, f32(dy).data(), arg32.data(), dx32.data()}, dx32.numel());
      require_close(f32(dx), f32(low(dx32)), 0, 0);
    }
  };
  check_type(bf16_bits{}, DType::kBF16);
  check_type(f16_bits{}, DType::kF16);
}
