// float16 (IEEE 754 binary16: 1 sign bit, 5 exponent bits, 10 mantissa bits)
// as bits. Conversions from float32 round to nearest, ties to even, with
// subnormals, overflow to infinity past 65504 (values from 65520 up), and NaN
// kept a quiet NaN, as the F16C instructions, oneDNN and CUDA's __float2half_rn
// do. Tensors of DType::kF16 hold these bits (mixed_float16 on a GPU). The bits
// are wrapped in a struct, not a bare uint16_t, so that value_of/store overload
// apart from bfloat16's (bfloat16.h). The conversions also run in the CUDA
// backend's kernels.
#pragma once

#include <stdint.h>
#include <string.h>  // memcpy: also callable in CUDA device code

#include "core/host_device.h"

namespace dtrain {

struct f16_bits {
  uint16_t bits;
};

DT_HOST_DEVICE inline float f16_to_f32(f16_bits h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  uint32_t u;
  if (exponent == 0x1f) {
    u = sign | 0x7f800000u | (mantissa << 13);  // infinity, or NaN with its payload
  } else if (exponent == 0) {
    // Zero or a subnormal: mantissa x 2^-24, exact in float32.
    float f = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    memcpy(&u, &f, sizeof u);
    u |= sign;
  } else {
    u = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

DT_HOST_DEVICE inline f16_bits f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity or NaN (a NaN stays a quiet NaN)
    const uint32_t nan = magnitude > 0x7f800000u ? 0x0200u | ((magnitude >> 13) & 0x3ffu) : 0u;
    return {static_cast<uint16_t>(sign | 0x7c00u | nan)};
  }
  // 65520 and up round to infinity (65504 is the largest float16; ties to even go up).
  if (magnitude >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};
  if (magnitude >= 0x38800000u) {  // a normal float16 (2^-14 and up)
    const uint32_t mantissa = magnitude & 0x7fffffu;
    uint32_t h = (((magnitude >> 23) - 112u) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry may move into the exponent: still right
    return {static_cast<uint16_t>(sign | h)};
  }
  // A subnormal float16, in units of 2^-24; 2^-25 and below round to zero.
  if (magnitude <= 0x33000000u) return {static_cast<uint16_t>(sign)};
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - (magnitude >> 23);  // 14 .. 24: the value is mantissa >> shift units
  uint32_t h = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (h & 1u))) ++h;  // up to 0x400: the smallest normal, correctly encoded
  return {static_cast<uint16_t>(sign | h)};
}

// value_of / store (bfloat16.h) for float16 elements.
DT_HOST_DEVICE inline float value_of(f16_bits v) { return f16_to_f32(v); }
DT_HOST_DEVICE inline void store(f16_bits* p, float v) { *p = f32_to_f16(v); }

}  // namespace dtrain
