// Dense on the GPU with cuBLASLt. Row-major (N, in) activations are column-major
// (in, N) matrices to cuBLAS, and Keras' (in, out) kernel is a column-major
// (out, in) matrix, so every product needs no copy:
//   forward          Y^T (out, N)  = W^T (out, in) . X^T (in, N)          + bias/relu epilogue
//   backward data    dX^T (in, N)  = (W^T)^T (in, out) . dY^T (out, N)
//   backward weights dW^T (out, in) = dY^T (out, N) . (X^T)^T (N, in)
// FP32 math (CUBLAS_COMPUTE_32F, PyTorch's default for matmuls); under mixed
// precision the activations and the kernel's copy are bfloat16 or float16
// (accumulated in float32; the weight gradient and the bias stay float32). Each shape's and
// types' descriptors and algorithm are chosen once (cuBLASLt's heuristic) and cached.
// Where no algorithm offers the fused epilogue, the bias and activation run as
// an own kernel after a plain product. batched_matmul (matmul.h) runs the same
// plans over a batch of equal, contiguous matrices (attention's heads).
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elements.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/runtime.h"

namespace dtrain::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommended size for Hopper

struct MatmulKey {
  int device;  // a plan per GPU: its algorithm is the GPU's, and its bias pointer is set by one thread
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t batch;  // matrices of each operand, contiguous one after the other (1: a plain product)
  cudaDataType_t ab, cd;  // the inputs' type and the output's (CUDA_R_32F, or CUDA_R_16BF / CUDA_R_16F under mixed precision)
  cublasLtEpilogue_t epilogue;
  uint32_t align_a, align_b, align_c;  // pointer alignments (bytes, up to 256): the heuristic must respect them
  auto tie() const {
    return std::tie(device, trans_a, trans_b, m, n, k, batch, ab, cd, epilogue, align_a, align_b, align_c);
  }
  bool operator<(const MatmulKey& o) const { return tie() < o.tie(); }
};

struct MatmulPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool found = false;
};

// Builds descriptors and asks the heuristic for the best algorithm; plan.found
// is false when none supports this epilogue.
MatmulPlan make_plan(const MatmulKey& key) {
  MatmulPlan plan;
  DT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  DT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  DT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  DT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &key.epilogue,
                                                 sizeof key.epilogue));
  // Stored shapes (before the transposes), column-major, leading dimension = rows.
  const uint64_t a_rows = key.trans_a ? key.k : key.m, a_cols = key.trans_a ? key.m : key.k;
  const uint64_t b_rows = key.trans_b ? key.n : key.k, b_cols = key.trans_b ? key.k : key.n;
  DT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, key.ab, a_rows, a_cols, static_cast<int64_t>(a_rows)));
  DT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, key.ab, b_rows, b_cols, static_cast<int64_t>(b_rows)));
  DT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, key.cd, key.m, key.n, key.m));
  if (key.batch > 1) {
    // A batch of matrices, each right after the one before (strides in elements).
    const int32_t count = static_cast<int32_t>(key.batch);
    const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {
        {plan.a, static_cast<int64_t>(a_rows * a_cols)},
        {plan.b, static_cast<int64_t>(b_rows * b_cols)},
        {plan.c, key.m * key.n}};
    for (const auto& [layout, stride] : layouts) {
      DT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      DT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                       sizeof stride));
    }
  }
  if (key.cd != CUDA_R_32F && key.epilogue != CUBLASLT_EPILOGUE_DEFAULT && key.epilogue != CUBLASLT_EPILOGUE_RELU) {
    // A 16-bit output with the float32 bias of the variables (mixed precision).
    const cudaDataType_t bias_type = CUDA_R_32F;
    DT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                   sizeof bias_type));
  }
  cublasLtMatmulPreference_t pref = nullptr;
  DT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t max_ws = kWorkspaceBytes;
  DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                                       sizeof max_ws));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
  for (const auto& [attribute, value] : aligns)
    DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof value));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(context().lt, plan.desc, plan.a, plan.b, plan.c,
                                                               plan.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0) {
    plan.algo = result.algo;
    plan.workspace = result.workspaceSize;
    plan.found = true;
  } else if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED &&
             key.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
    // A plain product must have an algorithm; a refused epilogue (NOT_SUPPORTED
    // or INVALID_VALUE) leaves plan.found false and the caller adds bias and
    // activation with its own kernel.
    throw_cublas_error("cublasLtMatmulAlgoGetHeuristic", status, __FILE__, __LINE__);
  }
  return plan;
}

const char* cuda_type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return "float32";
    case CUDA_R_16BF: return "bfloat16";
    case CUDA_R_16F: return "float16";
    default: return "another type";
  }
}

MatmulPlan& plan_for(const MatmulKey& key) {
  static std::mutex mutex;
  static std::map<MatmulKey, MatmulPlan> plans;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end()) {
    try {
      it = plans.emplace(key, make_plan(key)).first;
    } catch (const CudaError& e) {
      // Name the product (shapes, types, GPU) before the library's own words.
      throw CudaError(str("cuBLASLt cannot set up ", key.batch > 1 ? "an attention" : "a Dense", " matmul (", key.m,
                          "x", key.k, ")x(", key.k, "x", key.n, ")", key.batch > 1 ? str(" x ", key.batch) : "",
                          " with ", cuda_type_name(key.ab), " inputs and a ", cuda_type_name(key.cd),
                          " output on cuda:", key.device, ": ", e.what(),
                          "; try train.precision \"float32\" or report this line"));
    }
  }
  return it->second;
}

// A matrix on the device and its element type.
struct Operand {
  const void* p;
  cudaDataType_t type;
};
Operand operand(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kF32: return {t.raw(), CUDA_R_32F};
    case DType::kBF16: return {t.raw(), CUDA_R_16BF};
    case DType::kF16: return {t.raw(), CUDA_R_16F};
  }
  DT_CHECK(false, "dense on the GPU: an unknown dtype");
  return {};
}

const char* type_name(cudaDataType_t type) {
  return type == CUDA_R_16BF ? "bfloat16" : type == CUDA_R_16F ? "float16" : "float32";
}

// C (m, n) = op(A) . op(B), column-major; `bias` (m values) for the bias epilogues.
// A and B share a type; C may differ (16-bit inputs, float32 weight gradient).
// Float32 accumulation always. Returns false when no algorithm supports
// `epilogue` (nothing was computed).
bool matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Operand a, Operand b, Operand c,
            cublasLtEpilogue_t epilogue, const float* bias, int64_t batch = 1, float alpha = 1.0f) {
  DT_CHECK(a.type == b.type, "a matmul's two inputs in different types");
  MatmulPlan& plan = plan_for({current_device(), trans_a, trans_b, m, n, k, batch, a.type, c.type, epilogue,
                               alignment(a.p), alignment(b.p), alignment(c.p)});
  if (!plan.found) {
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) return false;
    throw CudaError(str("cuBLASLt has no algorithm for a ", m, "x", n, "x", k, " matmul of ",
                        type_name(a.type), " inputs"));
  }
  if (bias)
    DT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  const float beta = 0.0f;
  Scratch workspace(std::max<size_t>(plan.workspace, 256));
  void* out = const_cast<void*>(c.p);
  DT_CUBLAS_CHECK(cublasLtMatmul(context().lt, plan.desc, &alpha, a.p, plan.a, b.p, plan.b, &beta, out, plan.c, out,
                                 plan.c, &plan.algo, workspace.get(), plan.workspace, context().compute));
  return true;
}

}  // namespace

void batched_matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t batch, float alpha,
                    const float* a, const float* b, float* c) {
  DT_CHECK(batch >= 1 && m > 0 && n > 0 && k > 0, "batched_matmul shapes");
  matmul(trans_a, trans_b, m, n, k, {a, CUDA_R_32F}, {b, CUDA_R_32F}, {c, CUDA_R_32F}, CUBLASLT_EPILOGUE_DEFAULT,
         nullptr, batch, alpha);
}

void dense_forward(const Tensor& x, const Tensor& w, const Tensor* b, Activation act, Tensor& y) {
  const int64_t n = x.dim(0), in = w.dim(0), out = w.dim(1);
  DT_CHECK_EQ(x.numel(), n * in);
  DT_CHECK_EQ(y.numel(), n * out);
  DT_CHECK(act != Activation::kSoftmax, "dense_forward: apply softmax separately");
  DT_CHECK(x.dtype() == y.dtype(), "dense_forward: input and output in one dtype");
  if (b) DT_CHECK_EQ(b->numel(), out);
  if (n == 0) return;
  const float* bias = b ? b->data() : nullptr;
  // relu and linear fuse into the product's epilogue; sigmoid and tanh follow it.
  const bool fusable = act == Activation::kRelu || act == Activation::kLinear;
  cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (act == Activation::kRelu) epilogue = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  const auto bias_activation = [&](const float* with_bias) {
    by_element_type({&y}, [&](auto t) {
      using T = decltype(t);
      launch(BiasActivationBody<T>{elements<T>(y), with_bias, out, act}, n * out);
    });
  };
  if (!matmul(false, false, out, n, in, operand(w), operand(x), operand(y), epilogue, bias)) {
    // No algorithm with that epilogue: a plain product, then bias and activation.
    matmul(false, false, out, n, in, operand(w), operand(x), operand(y), CUBLASLT_EPILOGUE_DEFAULT, nullptr);
    bias_activation(bias);
    return;
  }
  if (!fusable) bias_activation(nullptr);
}

void dense_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  const int64_t n = dy.dim(0), in = w.dim(0), out = w.dim(1);
  DT_CHECK_EQ(dy.numel(), n * out);
  DT_CHECK_EQ(dx.numel(), n * in);
  if (n == 0) return;
  matmul(true, false, in, n, out, operand(w), operand(dy), operand(dx), CUBLASLT_EPILOGUE_DEFAULT, nullptr);
}

void dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) {
  const int64_t n = x.dim(0), in = dw.dim(0), out = dw.dim(1);
  DT_CHECK_EQ(x.numel(), n * in);
  DT_CHECK_EQ(dy.numel(), n * out);
  if (n == 0) {
    dw.zero();
    if (db) db->zero();
    return;
  }
  // The weight gradient is float32 whatever the activations' type.
  matmul(false, true, out, in, n, operand(dy), operand(x), operand(dw), CUBLASLT_EPILOGUE_DEFAULT, nullptr);
  if (!db) return;
  by_element_type({&dy}, [&](auto t) {
    using T = decltype(t);
    column_sums(ElementValue<T>{elements<T>(dy), out}, n, out, 1.0f, db->data());
  });
}

}  // namespace dtrain::kernels::cuda
