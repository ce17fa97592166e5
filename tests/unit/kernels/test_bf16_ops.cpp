// The CPU ops in bfloat16 (train.precision mixed_bfloat16) against the same ops in
// float32 on the same (bf16-representable) inputs: the float32 ops are checked
// against reference loops in test_ops.cpp, so a bf16 op may differ from its
// float32 twin only by the rounding of its bfloat16 outputs (accumulation is in
// float32). Also the conversions themselves: round to nearest even, NaN and inf.
#include <catch2/catch.hpp>
#include <cmath>
#include <iostream>
#include <limits>

#include "core/error.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "tensor/bfloat16.h"
#include "unit/tensor_checks.h"

using namespace dtrain;
using kernels::Activation;
using testing::random_tensor;
using testing::require_close;

namespace {

Tensor to_dtype(const Tensor& x, DType dtype) {
  Tensor y(x.shape(), x.device(), dtype);
  kernels::cast(x, y);
  return y;
}
Tensor to_bf16(const Tensor& x) { return to_dtype(x, DType::kBF16); }
Tensor to_f32(const Tensor& x) { return to_dtype(x, DType::kF32); }
// Random float32 values that bfloat16 holds exactly, so both paths see the same inputs.
Tensor random_bf16_exact(Shape shape, uint64_t seed) { return to_f32(to_bf16(random_tensor(std::move(shape), seed))); }
Tensor bf16_like(const Tensor& t) { return Tensor(t.shape(), t.device(), DType::kBF16); }

// bf16 outputs: one rounding of a float32 value, relative 2^-8 at most.
constexpr double kRtol = 1.0 / 128, kAtol = 1e-3;

}  // namespace

TEST_CASE("float32 to bfloat16 rounds to nearest even and keeps NaN and infinities") {
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);  // above halfway
  CHECK(bf16_to_f32(f32_to_bf16(-2.5f)) == -2.5f);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity())) == std::numeric_limits<float>::infinity());
  // The largest float rounds to infinity, as in every bfloat16 implementation.
  CHECK(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::max()))));
}

TEST_CASE("kernels::cast agrees with the scalar conversion and round-trips bfloat16 values", "[bf16]") {
  const Tensor x = random_tensor({1000}, 3, -50.0, 50.0);
  const Tensor b = to_bf16(x);
  REQUIRE(b.dtype() == DType::kBF16);
  CHECK(b.bytes() == 2000);
  for (int64_t i = 0; i < x.numel(); ++i) {
    INFO("element " << i << " = " << x.data()[i]);
    REQUIRE(b.data_bf16()[i] == f32_to_bf16(x.data()[i]));
  }
  const Tensor back = to_f32(b);
  require_close(back, x, 0.0, 1.0 / 256);
  require_close(to_f32(to_bf16(back)), back, 0.0, 0.0);  // exact the second time
}

TEST_CASE("a bfloat16 tensor refuses float32 access and copies between dtypes") {
  Tensor b({4}, Device::cpu(), DType::kBF16);
  CHECK_THROWS_AS(b.data(), InternalError);
  Tensor f({4});
  CHECK_THROWS_AS(f.copy_from(b), InternalError);
  b.fill(3.0f);
  CHECK(bf16_to_f32(b.data_bf16()[3]) == 3.0f);
  const Tensor c = b.clone();
  CHECK(c.dtype() == DType::kBF16);
  CHECK(c.data_bf16()[0] == b.data_bf16()[0]);
  CHECK(dtype_name(c.dtype()) == std::string("bfloat16"));
}

TEST_CASE("dense forward and backward in bfloat16 match float32 on the same inputs", "[bf16]") {
  kernels::set_num_threads(2);
  const Tensor x = random_bf16_exact({17, 40}, 1), w = random_bf16_exact({40, 24}, 2);
  const Tensor b = random_tensor({24}, 3), dy = random_bf16_exact({17, 24}, 4);
  for (Activation act : {Activation::kLinear, Activation::kRelu}) {
    Tensor y({17, 24});
    kernels::dense_forward(x, w, &b, act, y);
    Tensor yb = bf16_like(y);
    kernels::dense_forward(to_bf16(x), to_bf16(w), &b, act, yb);
    require_close(to_f32(yb), y, kAtol, kRtol);
  }
  Tensor dx({17, 40}), dw({40, 24}), db({24});
  kernels::dense_backward_data(dy, w, dx);
  kernels::dense_backward_weights(x, dy, dw, &db);
  Tensor dxb = bf16_like(dx), dwb({40, 24}), dbb({24});  // weight gradients stay float32
  kernels::dense_backward_data(to_bf16(dy), to_bf16(w), dxb);
  kernels::dense_backward_weights(to_bf16(x), to_bf16(dy), dwb, &dbb);
  require_close(to_f32(dxb), dx, kAtol, kRtol);
  require_close(dwb, dw, 1e-4, 1e-4);  // same products, float32 sums
  require_close(dbb, db, 1e-4, 1e-4);
}

TEST_CASE("conv2d forward and both backward passes in bfloat16 match float32", "[bf16]") {
  kernels::set_num_threads(2);
  kernels::Conv2DParams p;
  p.stride[0] = p.stride[1] = 2;
  p.pad_before[0] = p.pad_before[1] = 1;
  p.pad_after[0] = p.pad_after[1] = 1;
  const Tensor x = random_bf16_exact({3, 9, 9, 5}, 11), w = random_bf16_exact({3, 3, 5, 8}, 12);
  const Tensor b = random_tensor({8}, 13), dy = random_bf16_exact({3, 5, 5, 8}, 14);
  Tensor y({3, 5, 5, 8});
  kernels::conv2d_forward(x, w, &b, p, Activation::kRelu, y);
  Tensor yb = bf16_like(y);
  kernels::conv2d_forward(to_bf16(x), to_bf16(w), &b, p, Activation::kRelu, yb);
  require_close(to_f32(yb), y, kAtol, kRtol);

  Tensor dx(x.shape()), dw(w.shape()), db({8});
  kernels::conv2d_backward_data(dy, w, p, dx);
  kernels::conv2d_backward_weights(x, dy, p, dw, &db);
  Tensor dxb = bf16_like(dx), dwb(w.shape()), dbb({8});
  kernels::conv2d_backward_data(to_bf16(dy), to_bf16(w), p, dxb);
  kernels::conv2d_backward_weights(to_bf16(x), to_bf16(dy), p, dwb, &dbb);
  require_close(to_f32(dxb), dx, kAtol, kRtol);
  require_close(dwb, dw, 1e-3, 1e-3);
  require_close(dbb, db, 1e-3, 1e-3);
}

TEST_CASE("pooling, relu and dropout in bfloat16 match float32", "[bf16]") {
  kernels::set_num_threads(2);
  const Tensor x = random_bf16_exact({2, 8, 8, 6}, 21), dy = random_bf16_exact({2, 4, 4, 6}, 22);
  for (kernels::PoolKind kind : {kernels::PoolKind::kMax, kernels::PoolKind::kAverage}) {
    kernels::Pool2DParams p;
    p.kind = kind;
    kernels::Workspace ws, wsb;
    Tensor y({2, 4, 4, 6}), dx(x.shape());
    kernels::pool2d_forward(x, p, y, &ws);
    kernels::pool2d_backward(dy, p, &ws, dx);
    Tensor yb = bf16_like(y), dxb = bf16_like(dx);
    kernels::pool2d_forward(to_bf16(x), p, yb, &wsb);
    kernels::pool2d_backward(to_bf16(dy), p, &wsb, dxb);
    if (kind == kernels::PoolKind::kMax) {
      require_close(to_f32(yb), y, 0.0, 0.0);  // a maximum and its routing are exact
      require_close(to_f32(dxb), dx, 0.0, 0.0);
    } else {
      require_close(to_f32(yb), y, kAtol, kRtol);
      require_close(to_f32(dxb), dx, kAtol, kRtol);
    }
  }
  SECTION("relu forward and backward") {
    Tensor y(x.shape()), dx(x.shape());
    const Tensor g = random_bf16_exact(x.shape(), 23);
    kernels::activation_forward(Activation::kRelu, x, y);
    kernels::activation_backward(Activation::kRelu, y, g, dx);
    Tensor yb = bf16_like(y), dxb = bf16_like(dx);
    kernels::activation_forward(Activation::kRelu, to_bf16(x), yb);
    kernels::activation_backward(Activation::kRelu, yb, to_bf16(g), dxb);
    require_close(to_f32(yb), y, 0.0, 0.0);
    require_close(to_f32(dxb), dx, 0.0, 0.0);
  }
  SECTION("dropout draws the same mask and scales in float32") {
    Tensor y(x.shape()), mask(x.shape()), maskb(x.shape());
    kernels::dropout_forward(x, 0.3f, 99, y, mask);
    Tensor yb = bf16_like(y);
    kernels::dropout_forward(to_bf16(x), 0.3f, 99, yb, maskb);
    require_close(maskb, mask, 0.0, 0.0);
    require_close(to_f32(yb), y, 0.0, 1.0 / 256);
    // Dropout's backward: a bfloat16 gradient times the float32 mask.
    const Tensor g = random_bf16_exact(x.shape(), 24);
    Tensor back(x.shape()), backb = bf16_like(back);
    kernels::multiply(g, mask, back);
    kernels::multiply(to_bf16(g), maskb, backb);
    require_close(to_f32(backb), back, 0.0, 1.0 / 256);
  }
}

TEST_CASE("bfloat16 ops take oneDNN's bfloat16 kernels where the ISA has them, else the emulated path", "[bf16]") {
  // Under ONEDNN_MAX_CPU_ISA=AVX2 (the isa-avx2 run of this test) and on AVX2 CPUs
  // oneDNN has no bfloat16 matmul: the op must still run, on the emulated path.
  const bool avx2_or_less = kernels::cpu_isa() == "avx2" || kernels::cpu_isa() == "avx" ||
                            kernels::cpu_isa() == "sse41" || kernels::cpu_isa() == "avx2_vnni";
  if (avx2_or_less) CHECK(kernels::cpu_bf16() == kernels::CpuBf16::kEmulated);
  if (kernels::cpu_has_bf16()) CHECK(kernels::cpu_bf16() == kernels::CpuBf16::kNative);
  const std::string description = kernels::cpu_bf16_description();
  CHECK(description.find("ISA " + kernels::cpu_isa()) != std::string::npos);
  const bool emulated = kernels::cpu_bf16() == kernels::CpuBf16::kEmulated;
  CHECK((description.find("emulated, expect it slower than float32") != std::string::npos) == emulated);

  const int64_t before = kernels::cpu_bf16_emulated_ops();
  const Tensor x = random_bf16_exact({5, 11}, 31), w = random_bf16_exact({11, 7}, 32);
  Tensor y({5, 7}), yb({5, 7}, Device::cpu(), DType::kBF16);
  kernels::dense_forward(x, w, nullptr, Activation::kTanh, y);
  kernels::dense_forward(to_bf16(x), to_bf16(w), nullptr, Activation::kTanh, yb);
  require_close(to_f32(yb), y, kAtol, kRtol);
  // One new plan (this shape is used nowhere else), emulated exactly when the CPU path says so.
  CHECK(kernels::cpu_bf16_emulated_ops() - before == (emulated ? 1 : 0));
  // The plan is decided once: calling again makes no new one.
  kernels::dense_forward(to_bf16(x), to_bf16(w), nullptr, Activation::kTanh, yb);
  CHECK(kernels::cpu_bf16_emulated_ops() - before == (emulated ? 1 : 0));
}

TEST_CASE("bfloat16 runs on oneDNN's native kernels on a CPU with bfloat16 instructions") {
  if (!kernels::cpu_has_bf16()) {
    std::cout << "DTRAIN-SKIPPED: this CPU (oneDNN ISA " << kernels::cpu_isa()
              << ") has no bfloat16 instructions; the emulated path is tested by the [bf16] tests" << std::endl;
    return;
  }
  CHECK(kernels::cpu_bf16() == kernels::CpuBf16::kNative);
  const int64_t before = kernels::cpu_bf16_emulated_ops();
  kernels::Conv2DParams p;
  const Tensor x = to_bf16(random_tensor({2, 6, 6, 3}, 41)), w = to_bf16(random_tensor({3, 3, 3, 4}, 42));
  Tensor y({2, 4, 4, 4}, Device::cpu(), DType::kBF16);
  kernels::conv2d_forward(x, w, nullptr, p, Activation::kRelu, y);
  Tensor r(y.shape(), Device::cpu(), DType::kBF16);
  kernels::activation_forward(Activation::kSigmoid, y, r);
  CHECK(kernels::cpu_bf16_emulated_ops() == before);
}

TEST_CASE("an op oneDNN cannot create is a ConfigError naming the op, shapes, data types and ISA") {
  // oneDNN 2.6 has no float16 matmul on these CPUs, and float16 is never emulated.
  const Tensor x({4, 8}, Device::cpu(), DType::kF16), w({8, 3}, Device::cpu(), DType::kF16);
  Tensor y({4, 3}, Device::cpu(), DType::kF16);
  try {
    kernels::dense_forward(x, w, nullptr, Activation::kLinear, y);
    FAIL("a float16 matmul was created on the CPU");
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("Dense matmul (4x8)x(8x3)") != std::string::npos);
    CHECK(m.find("float16") != std::string::npos);
    CHECK(m.find("ISA " + kernels::cpu_isa()) != std::string::npos);
    CHECK(m.find("train.precision") != std::string::npos);
    CHECK(e.exit_code() == ExitCode::kConfig);
  }
}
