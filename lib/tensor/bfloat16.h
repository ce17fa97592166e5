// bfloat16 as bits: the upper 16 bits of a float32 (same exponent range, 8 bits
// of mantissa). Conversions from float32 round to nearest, ties to even, as
// oneDNN, PyTorch and TF do; NaN stays a (quiet) NaN. Tensors of DType::kBF16
// hold these bits. The two conversions also run in the CUDA backend's kernels.
#pragma once

#include <stdint.h>
#include <string.h>  // memcpy: also callable in CUDA device code

#include "core/host_device.h"

namespace dtrain {

using bf16_bits = uint16_t;

DT_HOST_DEVICE inline float bf16_to_f32(bf16_bits b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

DT_HOST_DEVICE inline bf16_bits f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
    return static_cast<bf16_bits>((u >> 16) | 0x0040u);  // NaN: keep it a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_bits>(u >> 16);
}

// Loops templated over the element type (float or bf16_bits) read a value as a
// float and store a float result back in their type through these.
DT_HOST_DEVICE inline float value_of(float v) { return v; }
DT_HOST_DEVICE inline float value_of(bf16_bits v) { return bf16_to_f32(v); }
DT_HOST_DEVICE inline void store(float* p, float v) { *p = v; }
DT_HOST_DEVICE inline void store(bf16_bits* p, float v) { *p = f32_to_bf16(v); }

}  // namespace dtrain
