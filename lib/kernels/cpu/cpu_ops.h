// The CPU backend's op functions: ops.h's signatures (backend_ops.inc) in
// dtrain::kernels::cpu. ops.cpp dispatches here for tensors on the CPU. Not
// included outside lib/kernels.
#pragma once

#include <string>

#include "kernels/ops.h"

namespace dtrain::kernels::cpu {

void set_num_threads(int threads);
int num_threads();
std::string library_version();  // "oneDNN 2.6.3"
std::string isa_name();          // oneDNN's instruction set, e.g. "avx512_core_bf16"
bool has_bf16_instructions();    // whether that set computes bfloat16 natively
bool has_bf16_kernels();         // whether oneDNN has bfloat16 kernels for it (else dtrain emulates)
int64_t bf16_emulated_plans();   // how many op plans (one per op and shape) emulate bfloat16 so far
void cast(const Tensor& x, Tensor& y);
// gelu (or any element-wise activation) by element_math.h's formula (sequence.cpp).
void activation_by_formula(Activation act, const Tensor& x, Tensor& y);
// gelu's dx from its input on oneDNN (activation.cpp); float32.
void gelu_backward(Activation act, const Tensor& x, const Tensor& dy, Tensor& dx);
// (ops.h's; the CPU's only)
void embedding_forward_part(const Tensor& ids, const Tensor& table, int64_t first, int64_t vocabulary, Tensor& y);
void embedding_backward_part(const Tensor& ids, const Tensor& dy, int64_t first, Tensor& dtable);

#include "kernels/backend_ops.inc"

}  // namespace dtrain::kernels::cpu
