// Implementation of onednn.h (the engine and streams, plans made natively or with
// bfloat16 emulated, staging, creation errors) and thread-count control for the CPU backend.
#include "kernels/cpu/onednn.h"

#include "core/strings.h"

#include <omp.h>
#include <xmmintrin.h>
#include <pmmintrin.h>

#include <dnnl_debug.h>

#include <atomic>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/cpu/cpu_ops.h"

namespace dtrain::kernels::cpu {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

void execute(const dnnl::primitive& p, const std::unordered_map<int, memory>& args) {
  try {
    p.execute(stream(), args);
  } catch (const dnnl::error& e) {
    throw RuntimeError(str("oneDNN failed to run a ", dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(p.get_kind())),
                           " primitive on this CPU (", library_version(), ", ISA ", isa_name(), "): ", e.what(),
                           "; report this line as a dtrain bug"));
  }
  // On the CPU with OpenMP the call above already ran to completion; wait() keeps
  // that true for other runtimes (threadpool) too.
  stream().wait();
}

void execute(const dnnl::primitive& p, const std::unordered_map<int, memory>& args, Staging& staging) {
  execute(p, args);
  staging.finish();
}

memory::data_type compute_type(const Tensor& t, bool emulated) {
  return emulated && t.dtype() == DType::kBF16 ? kF32 : dnnl_type(t);
}

bool any_bf16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t && t->dtype() == DType::kBF16) return true;
  return false;
}

void throw_creation_error(const Describe& describe, const dnnl::error& e, bool emulated) {
  throw ConfigError(str("oneDNN cannot create ", describe(), " on this CPU (", library_version(), ", ISA ",
                        isa_name(), "): ", e.what(),
                        emulated ? " (also tried in float32 in place of bfloat16)" : "",
                        "; check the layer's shape in the model, try train.precision \"float32\", or report "
                        "this line as a dtrain bug"));
}

namespace {
std::atomic<int64_t> emulated_plans{0};
}  // namespace

int64_t bf16_emulated_plans() { return emulated_plans.load(); }

void note_bf16_emulated(const Describe& describe) {
  if (emulated_plans.fetch_add(1) > 0) return;
  // Where oneDNN has no bfloat16 kernels at all, the job's set-up already said so
  // in one line (kernels::cpu_bf16_description); an op that falls back on a CPU
  // that has them is news.
  const log::Level level = has_bf16_kernels() ? log::Level::kInfo : log::Level::kDebug;
  if (log::level() > level) return;
  log::write(level, str("bfloat16: no native support on this CPU (ISA ", isa_name(),
            "); emulated, expect it slower than float32 (float32 math between bfloat16 roundings; first op: ",
            describe(), ")"));
}

memory Staging::staged(const memory::desc& md) {
  // One growing buffer per slot and thread: ops never nest, so the n-th staged
  // tensor of any execution on this thread can reuse the n-th buffer.
  thread_local std::vector<std::vector<char>> buffers;
  if (static_cast<int>(buffers.size()) <= slots_) buffers.resize(slots_ + 1);
  std::vector<char>& buffer = buffers[slots_++];
  if (buffer.size() < md.get_size()) buffer.resize(md.get_size());
  return memory(md, engine(), buffer.data());
}

memory Staging::in(const memory::desc& md, const Tensor& t) {
  if (!emulated_ || t.dtype() != DType::kBF16) return as_memory(md, t);
  DT_CHECK(md.data_type() == kF32, "an emulated plan's desc for a bfloat16 tensor is float32");
  memory m = staged(md);
  convert(t.raw(), DType::kBF16, m.get_data_handle(), DType::kF32, t.numel());
  return m;
}

memory Staging::out(const memory::desc& md, Tensor& t) {
  if (!emulated_ || t.dtype() != DType::kBF16) return as_memory(md, t);
  DT_CHECK(md.data_type() == kF32, "an emulated plan's desc for a bfloat16 tensor is float32");
  memory m = staged(md);
  outputs_.emplace_back(m, &t);
  return m;
}

void Staging::finish() {
  for (auto& [m, t] : outputs_) convert(m.get_data_handle(), DType::kF32, t->raw(), DType::kBF16, t->numel());
  outputs_.clear();
}

dnnl::algorithm eltwise_algorithm(Activation act) {
  switch (act) {
    case Activation::kRelu: return dnnl::algorithm::eltwise_relu;
    case Activation::kSigmoid: return dnnl::algorithm::eltwise_logistic;
    case Activation::kTanh: return dnnl::algorithm::eltwise_tanh;
    case Activation::kLinear: return dnnl::algorithm::eltwise_linear;
    case Activation::kGelu: return dnnl::algorithm::eltwise_gelu_erf;
    case Activation::kGeluTanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case Activation::kSoftmax: break;
  }
  DT_CHECK(false, "softmax is not an element-wise activation");
  return dnnl::algorithm::undef;
}

dnnl::algorithm eltwise_algorithm_dst(Activation act) {
  switch (act) {
    case Activation::kRelu: return dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
    case Activation::kSigmoid: return dnnl::algorithm::eltwise_logistic_use_dst_for_bwd;
    case Activation::kTanh: return dnnl::algorithm::eltwise_tanh_use_dst_for_bwd;
    default: break;
  }
  DT_CHECK(false, "no dst-based backward for this activation");
  return dnnl::algorithm::undef;
}

void set_num_threads(int threads) {
  DT_CHECK_GT(threads, 0);
  omp_set_num_threads(threads);
  // Flush denormals to zero on every compute thread, as TensorFlow does: once
  // weights and gradients drift into the denormal range, each float operation on
  // them costs ~100 cycles and a CNN epoch ran 10x slower. MXCSR is per thread;
  // OpenMP keeps its workers, so setting it once in a parallel region sticks.
#pragma omp parallel num_threads(threads)
  {
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
  }
}

int num_threads() { return omp_get_max_threads(); }

std::string library_version() {
  const dnnl_version_t* v = dnnl_version();
  return str("oneDNN ", v->major, ".", v->minor, ".", v->patch);
}

}  // namespace dtrain::kernels::cpu
