// The CUDA ops' element types: a tensor's elements as the type a body of
// bodies.h is templated on (float, bf16_bits or f16_bits), a dispatch on the
// dtype that the tensors of one op share, and the dtype as cuDNN names it.
#pragma once

#include <cudnn.h>

#include <initializer_list>

#include "core/check.h"
#include "tensor/bfloat16.h"
#include "tensor/float16.h"
#include "tensor/tensor.h"

namespace dtrain::kernels::cuda {

template <class T>
T* elements(Tensor& t);
template <class T>
const T* elements(const Tensor& t);

template <>
inline float* elements<float>(Tensor& t) { return t.data(); }
template <>
inline const float* elements<float>(const Tensor& t) { return t.data(); }
template <>
inline bf16_bits* elements<bf16_bits>(Tensor& t) { return t.data_bf16(); }
template <>
inline const bf16_bits* elements<bf16_bits>(const Tensor& t) { return t.data_bf16(); }
template <>
inline f16_bits* elements<f16_bits>(Tensor& t) { return t.data_f16(); }
template <>
inline const f16_bits* elements<f16_bits>(const Tensor& t) { return t.data_f16(); }

// Checks that every given tensor (null or undefined ones skipped) is float32:
// the ops that run in float32 only on the GPU (the transformer's).
inline void require_f32(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t && t->defined()) DT_CHECK(t->dtype() == DType::kF32, op, " runs in float32 on the GPU");
}

// Calls f(T{}) with T the element type of the tensors, which must all have one
// dtype: float32, or bfloat16 / float16 (the compute of mixed precision).
template <class F>
void by_element_type(std::initializer_list<const Tensor*> tensors, F&& f) {
  const DType dtype = (*tensors.begin())->dtype();
  for (const Tensor* t : tensors) DT_CHECK(t->dtype() == dtype, "tensors of different dtypes in one op");
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kBF16: return f(bf16_bits{});
    case DType::kF16: return f(f16_bits{});
  }
}

inline cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDNN_DATA_FLOAT;
    case DType::kBF16: return CUDNN_DATA_BFLOAT16;
    case DType::kF16: return CUDNN_DATA_HALF;
  }
  return CUDNN_DATA_FLOAT;
}

}  // namespace dtrain::kernels::cuda
