// Implementation of onednn.h, and thread-count control for the CPU backend.
#include "kernels/cpu/onednn.h"

#include "core/strings.h"

#include <omp.h>
#include <xmmintrin.h>
#include <pmmintrin.h>

#include "core/check.h"
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
  p.execute(stream(), args);
  // On the CPU with OpenMP the call above already ran to completion; wait() keeps
  // that true for other runtimes (threadpool) too.
  stream().wait();
}

dnnl::algorithm eltwise_algorithm(Activation act) {
  switch (act) {
    case Activation::kRelu: return dnnl::algorithm::eltwise_relu;
    case Activation::kSigmoid: return dnnl::algorithm::eltwise_logistic;
    case Activation::kTanh: return dnnl::algorithm::eltwise_tanh;
    case Activation::kLinear: return dnnl::algorithm::eltwise_linear;
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
