// Conversions between float32 and bfloat16 on the CPU (oneDNN reorders, which use
// the bf16 conversion instructions where the CPU has them; own loops where oneDNN
// has no bfloat16 kernels), the oneDNN helpers
// for tensors of any dtype, and which instruction set oneDNN runs on.
#include <algorithm>

#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn.h"
#include "tensor/bfloat16.h"

namespace dtrain::kernels::cpu {

memory::data_type dnnl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return memory::data_type::f32;
    case DType::kBF16: return memory::data_type::bf16;
    case DType::kF16: return memory::data_type::f16;
  }
  return memory::data_type::undef;
}

std::string dtype_key(std::initializer_list<const Tensor*> tensors) {
  std::string key;
  for (const Tensor* t : tensors) {
    if (!key.empty()) key += ',';
    key += t ? dtype_name(t->dtype()) : "-";
  }
  return key;
}

namespace {

// float32 <-> bfloat16 on own loops, for CPUs where oneDNN has no bfloat16 kernels:
// there its reorder is a reference loop (simple:any, measured on one core: 41 ms per
// million values float32 -> bfloat16 and 21 ms back, against 0.13 ms for its jit
// kernel on avx512), which made an emulated CNN step ~50x slower than float32.
// These loops take 0.18 and 0.08 ms per million and give the same bits (round to
// nearest even, NaN kept quiet: tensor/bfloat16.h).
[[gnu::target_clones("avx2", "default")]]
void narrow_block(const float* __restrict in, bf16_bits* __restrict out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

[[gnu::target_clones("avx2", "default")]]
void widen_block(const bf16_bits* __restrict in, float* __restrict out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

// Splits n elements into blocks over the compute threads (one block below 64K).
template <class In, class Out>
void convert_loops(const In* in, Out* out, int64_t n, void (*block)(const In*, Out*, int64_t)) {
  constexpr int64_t kBlock = 1 << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) block(in + b * kBlock, out + b * kBlock, std::min(kBlock, n - b * kBlock));
}

}  // namespace

void convert(const void* from, DType from_type, void* to, DType to_type, int64_t n) {
  if (!has_bf16_kernels() && from_type == DType::kF32 && to_type == DType::kBF16)
    return convert_loops(static_cast<const float*>(from), static_cast<bf16_bits*>(to), n, narrow_block);
  if (!has_bf16_kernels() && from_type == DType::kBF16 && to_type == DType::kF32)
    return convert_loops(static_cast<const bf16_bits*>(from), static_cast<float*>(to), n, widen_block);
  struct ConvertPlan {
    memory::desc from, to;
    dnnl::reorder prim;
  };
  auto& plan = cached<ConvertPlan>(str("convert:", n, ",", dtype_name(from_type), ",", dtype_name(to_type)), [&] {
    ConvertPlan plan;
    plan.from = memory::desc({n}, dnnl_type(from_type), Tag::a);
    plan.to = memory::desc({n}, dnnl_type(to_type), Tag::a);
    plan.prim = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), plan.from, engine(), plan.to));
    return plan;
  });
  execute(plan.prim, {{DNNL_ARG_FROM, memory(plan.from, engine(), const_cast<void*>(from))},
                      {DNNL_ARG_TO, memory(plan.to, engine(), to)}});
}

void cast(const Tensor& x, Tensor& y) {
  DT_CHECK_EQ(x.numel(), y.numel());
  if (x.numel() == 0) return;
  if (x.dtype() == y.dtype()) return y.copy_from(x);
  convert(x.raw(), x.dtype(), y.raw(), y.dtype(), x.numel());
}

std::string isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "generic";
  }
}

bool has_bf16_instructions() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

bool has_bf16_kernels() {
  // A small bfloat16 matmul stands for the rest: oneDNN 2.6 has its bf16 matmul,
  // convolution, eltwise and pooling kernels from the same ISA on (avx512_core).
  // Each op still decides for itself when its plan is made (onednn.h).
  static const bool available = [] {
    try {
      const memory::desc a({2, 2}, kBF16, Tag::ab);
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, a), engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

}  // namespace dtrain::kernels::cpu
