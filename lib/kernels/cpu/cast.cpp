// Conversions between float32 and bfloat16 on the CPU (oneDNN reorders, which use
// the bf16 conversion instructions where the CPU has them), the oneDNN helpers
// for tensors of any dtype, and which instruction set oneDNN runs on.
#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn.h"

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
  for (const Tensor* t : tensors) key += t ? dtype_name(t->dtype()) : "-", key += ",";
  return key;
}

void cast(const Tensor& x, Tensor& y) {
  DT_CHECK_EQ(x.numel(), y.numel());
  if (x.numel() == 0) return;
  if (x.dtype() == y.dtype()) return y.copy_from(x);
  struct CastPlan {
    memory::desc from, to;
    dnnl::reorder prim;
  };
  const int64_t n = x.numel();
  auto& plan = cached<CastPlan>(str("cast:", n, ",", dtype_key({&x, &y})), [&] {
    CastPlan plan;
    plan.from = memory::desc({n}, dnnl_type(x), Tag::a);
    plan.to = memory::desc({n}, dnnl_type(y), Tag::a);
    plan.prim = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), plan.from, engine(), plan.to));
    return plan;
  });
  execute(plan.prim, {{DNNL_ARG_FROM, as_memory(plan.from, x)}, {DNNL_ARG_TO, as_memory(plan.to, y)}});
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

}  // namespace dtrain::kernels::cpu
