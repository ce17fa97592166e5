// Conv2D on the GPU with cuDNN's convolution API (NHWC tensors, float32; or
// bfloat16 / float16 under mixed precision, accumulated in float32: cuDNN's
// "pseudo" configurations, on tensor cores where cuDNN picks them; the bias and
// the weight gradient stay float32, as the variables).
//
// Keras keeps kernels as (KH, KW, C, F); cuDNN's NHWC filters are (F, KH, KW, C),
// so each call converts with an own transpose kernel (small next to the
// convolution). cuDNN pads symmetrically; Keras' "same" padding can put one more
// row or column after than before (stride 2, even input), and then the input is
// padded explicitly into a scratch buffer and cuDNN runs without padding.
//
// Algorithms are measured once per shape with cudnnFind*AlgorithmEx (as
// PyTorch's cudnn.benchmark does) and cached; bias and activation follow the
// convolution as one own kernel. TF32 tensor-core math is allowed unless
// set_allow_tf32(false) (PyTorch's default for convolutions).
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elements.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/runtime.h"

namespace dtrain::kernels::cuda {
namespace {

constexpr size_t kSearchWorkspaceBytes = 256u << 20;  // workspace offered while measuring algorithms

struct ConvKey {
  int device;  // a plan per GPU (its algorithms are measured there)
  int64_t n, h, w, c, f, kh, kw, oh, ow, sh, sw, pt, pl, pb, pr;
  bool tf32;
  DType dtype;     // of the input, the filter and the output
  uint32_t align;  // the three tensors' smallest pointer alignment: an algorithm found on aligned
                   // pointers may need it, so a view at another offset gets a plan of its own
  auto tie() const {
    return std::tie(device, n, h, w, c, f, kh, kw, oh, ow, sh, sw, pt, pl, pb, pr, tf32, dtype, align);
  }
  bool operator<(const ConvKey& o) const { return tie() < o.tie(); }
};

template <class Algo>
struct Choice {
  bool chosen = false;
  Algo algo{};
  size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

struct ConvPlan {
  bool padded = false;  // asymmetric padding: the input is padded explicitly
  int64_t ph = 0, pw = 0;  // (padded) input height and width as cuDNN sees it
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Choice<cudnnConvolutionFwdAlgo_t> forward;
  Choice<cudnnConvolutionBwdDataAlgo_t> backward_data;
  Choice<cudnnConvolutionBwdFilterAlgo_t> backward_filter;
};

ConvKey key_of(const Tensor& xt, const Tensor& wt, const Tensor& yt, const Conv2DParams& p) {
  const Shape &x = xt.shape(), &w = wt.shape(), &y = yt.shape();
  DT_CHECK(x.size() == 4 && w.size() == 4 && y.size() == 4, "conv2d ranks");
  DT_CHECK_EQ(x[0], y[0]);
  DT_CHECK_EQ(x[3], w[2]);
  DT_CHECK_EQ(y[3], w[3]);
  return {current_device(), x[0], x[1], x[2], x[3], w[3], w[0], w[1], y[1], y[2], p.stride[0], p.stride[1],
          p.pad_before[0], p.pad_before[1], p.pad_after[0], p.pad_after[1], allow_tf32(), xt.dtype(),
          std::min({alignment(xt.raw()), alignment(wt.raw()), alignment(yt.raw())})};
}

ConvPlan make_plan(const ConvKey& k) {
  ConvPlan plan;
  plan.padded = k.pt != k.pb || k.pl != k.pr;
  plan.ph = plan.padded ? k.h + k.pt + k.pb : k.h;
  plan.pw = plan.padded ? k.w + k.pl + k.pr : k.w;
  const int pad_h = plan.padded ? 0 : static_cast<int>(k.pt);
  const int pad_w = plan.padded ? 0 : static_cast<int>(k.pl);
  DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan.x));
  DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan.y));
  DT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan.w));
  DT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan.conv));
  const cudnnDataType_t type = cudnn_type(k.dtype);
  DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.x, CUDNN_TENSOR_NHWC, type, static_cast<int>(k.n),
                                            static_cast<int>(k.c), static_cast<int>(plan.ph), static_cast<int>(plan.pw)));
  DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.y, CUDNN_TENSOR_NHWC, type, static_cast<int>(k.n),
                                            static_cast<int>(k.f), static_cast<int>(k.oh), static_cast<int>(k.ow)));
  DT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan.w, type, CUDNN_TENSOR_NHWC, static_cast<int>(k.f),
                                            static_cast<int>(k.c), static_cast<int>(k.kh), static_cast<int>(k.kw)));
  // Float32 accumulation whatever the data type (PSEUDO_HALF / PSEUDO_BFLOAT16).
  DT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan.conv, pad_h, pad_w, static_cast<int>(k.sh),
                                                 static_cast<int>(k.sw), 1, 1, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT));
  // cuDNN's own idea of the output size must be ours, or the descriptors disagree.
  int n = 0, c = 0, h = 0, w = 0;
  DT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan.conv, plan.x, plan.w, &n, &c, &h, &w));
  if (h != k.oh || w != k.ow || c != k.f)
    throw InternalError(str("cuDNN computes a ", h, "x", w, "x", c, " convolution output where the layer expects ",
                            k.oh, "x", k.ow, "x", k.f));
  return plan;
}

// "a Conv2D (input (64,28,28,1), kernel (3,3,1,32), output (64,26,26,32), strides 1,1,
// padding 0,0,0,0) in bfloat16 on cuda:0": what a plan is for, in its errors.
std::string describe(const ConvKey& k) {
  return str("a Conv2D (input ", shape_str({k.n, k.h, k.w, k.c}), ", kernel ", shape_str({k.kh, k.kw, k.c, k.f}),
             ", output ", shape_str({k.n, k.oh, k.ow, k.f}), ", strides ", k.sh, ",", k.sw, ", padding ", k.pt, ",",
             k.pl, ",", k.pb, ",", k.pr, ") in ", dtype_name(k.dtype), " on cuda:", k.device);
}

// Runs a step of making or choosing a plan; a CUDA or cuDNN failure in it names
// the convolution (shapes, data type, GPU) before the library's own words.
template <class F>
void for_plan(const ConvKey& key, const char* step, F&& f) {
  try {
    f();
  } catch (const CudaError& e) {
    throw CudaError(str("cuDNN cannot ", step, " ", describe(key), ": ", e.what(),
                        "; try train.precision \"float32\" or another kernel shape, or report this line"));
  }
}

ConvPlan& plan_for(const ConvKey& key) {
  static std::mutex mutex;
  static std::map<ConvKey, ConvPlan> plans;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end()) for_plan(key, "set up", [&] { it = plans.emplace(key, make_plan(key)).first; });
  return it->second;
}

// The math type offered to the search, and whether a measured result may be used.
// 16-bit data: tensor cores are the point (DEFAULT math permits them).
cudnnMathType_t search_math(DType dtype) {
  return allow_tf32() || dtype != DType::kF32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}
// Float32 data without TF32: only FMA math may run (on Ampere and later, DEFAULT
// math permits TF32); never a math type that converts float32 data down to half
// precision. 16-bit data: any math but such a conversion.
bool math_allowed(cudnnMathType_t m, DType dtype) {
  if (m == CUDNN_FMA_MATH) return true;
  return (allow_tf32() || dtype != DType::kF32) && (m == CUDNN_DEFAULT_MATH || m == CUDNN_TENSOR_OP_MATH);
}

template <class Perf, class Algo>
void take_best(const std::vector<Perf>& results, int count, DType dtype, Choice<Algo>& choice, const char* what) {
  for (int i = 0; i < count; ++i) {
    if (results[i].status != CUDNN_STATUS_SUCCESS || !math_allowed(results[i].mathType, dtype)) continue;
    choice.algo = results[i].algo;
    choice.workspace = results[i].memory;
    choice.math = allow_tf32() || dtype != DType::kF32 ? results[i].mathType : CUDNN_FMA_MATH;
    choice.chosen = true;
    return;
  }
  throw CudaError(str("cuDNN found no usable ", what, " algorithm for this convolution shape"));
}

// The input as cuDNN sees it: x itself, or x padded into `scratch`.
const void* conv_input(const ConvPlan& plan, const ConvKey& k, const Tensor& x, Scratch* scratch) {
  if (!plan.padded) return x.raw();
  by_element_type({&x}, [&](auto t) {
    using T = decltype(t);
    launch(PadBody<T>{elements<T>(x), static_cast<T*>(scratch->get()), k.h, k.w, k.c, plan.ph, plan.pw, k.pt, k.pl},
           k.n * plan.ph * plan.pw * k.c);
  });
  return scratch->get();
}

size_t padded_bytes(const ConvPlan& plan, const ConvKey& k) {
  return plan.padded ? static_cast<size_t>(k.n * plan.ph * plan.pw * k.c) * dtype_size(k.dtype) : 256;
}

// Keras' kernel in cuDNN's filter layout.
void to_filter_layout(const Tensor& w, const ConvKey& k, void* out) {
  by_element_type({&w}, [&](auto t) {
    using T = decltype(t);
    launch(HwioToOhwiBody<T>{elements<T>(w), static_cast<T*>(out), k.kh * k.kw * k.c, k.f}, w.numel());
  });
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2DParams& p, Activation act,
                    Tensor& y) {
  DT_CHECK(act != Activation::kSoftmax, "conv2d_forward: apply softmax separately");
  if (x.dim(0) == 0) return;
  DT_CHECK(x.dtype() == w.dtype() && x.dtype() == y.dtype(), "conv2d_forward: input, kernel and output in one dtype");
  const ConvKey k = key_of(x, w, y, p);
  ConvPlan& plan = plan_for(k);
  Scratch padded(padded_bytes(plan, k));
  Scratch filter(w.bytes());
  const void* input = conv_input(plan, k, x, &padded);
  to_filter_layout(w, k, filter.get());
  cudnnHandle_t h = context().cudnn;
  if (!plan.forward.chosen) {
    for_plan(k, "choose a forward algorithm for", [&] {
      DT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, search_math(k.dtype)));
      Scratch search(kSearchWorkspaceBytes);
      std::vector<cudnnConvolutionFwdAlgoPerf_t> results(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
      int count = 0;
      DT_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, plan.x, input, plan.w, filter.get(), plan.conv, plan.y,
                                                            y.raw(), static_cast<int>(results.size()), &count,
                                                            results.data(), search.get(), search.bytes()));
      take_best(results, count, k.dtype, plan.forward, "forward");
    });
  }
  DT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.forward.math));
  Scratch workspace(std::max<size_t>(plan.forward.workspace, 256));
  const float alpha = 1.0f, beta = 0.0f;  // float32 scaling factors for every data type here
  DT_CUDNN_CHECK(cudnnConvolutionForward(h, &alpha, plan.x, input, plan.w, filter.get(), plan.conv,
                                         plan.forward.algo, workspace.get(), plan.forward.workspace, &beta, plan.y,
                                         y.raw()));
  if (b || act != Activation::kLinear)
    by_element_type({&y}, [&](auto t) {
      using T = decltype(t);
      launch(BiasActivationBody<T>{elements<T>(y), b ? b->data() : nullptr, k.f, act}, y.numel());
    });
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Conv2DParams& p, Tensor& dx) {
  if (dx.dim(0) == 0) return;
  DT_CHECK(dy.dtype() == w.dtype() && dy.dtype() == dx.dtype(),
           "conv2d_backward_data: gradients and kernel in one dtype");
  const ConvKey k = key_of(dx, w, dy, p);
  ConvPlan& plan = plan_for(k);
  Scratch filter(w.bytes());
  to_filter_layout(w, k, filter.get());
  // With explicit padding, cuDNN writes the gradient of the padded input; the
  // interior is dx.
  Scratch padded(padded_bytes(plan, k));
  void* out = plan.padded ? padded.get() : dx.raw();
  cudnnHandle_t h = context().cudnn;
  if (!plan.backward_data.chosen) {
    for_plan(k, "choose a backward-data algorithm for", [&] {
      DT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, search_math(k.dtype)));
      Scratch search(kSearchWorkspaceBytes);
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> results(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
      int count = 0;
      DT_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, plan.w, filter.get(), plan.y, dy.raw(), plan.conv,
                                                                 plan.x, out, static_cast<int>(results.size()), &count,
                                                                 results.data(), search.get(), search.bytes()));
      take_best(results, count, k.dtype, plan.backward_data, "backward-data");
    });
  }
  DT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.backward_data.math));
  Scratch workspace(std::max<size_t>(plan.backward_data.workspace, 256));
  const float alpha = 1.0f, beta = 0.0f;
  DT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &alpha, plan.w, filter.get(), plan.y, dy.raw(), plan.conv,
                                              plan.backward_data.algo, workspace.get(), plan.backward_data.workspace,
                                              &beta, plan.x, out));
  if (plan.padded)
    by_element_type({&dx}, [&](auto t) {
      using T = decltype(t);
      launch(CropBody<T>{static_cast<const T*>(padded.get()), elements<T>(dx), k.h, k.w, k.c, plan.ph, plan.pw, k.pt,
                         k.pl},
             dx.numel());
    });
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Conv2DParams& p, Tensor& dw, Tensor* db) {
  if (x.dim(0) == 0) {
    dw.zero();
    if (db) db->zero();
    return;
  }
  DT_CHECK(x.dtype() == dy.dtype(), "conv2d_backward_weights: input and gradient in one dtype");
  const ConvKey k = key_of(x, dw, dy, p);
  ConvPlan& plan = plan_for(k);
  Scratch padded(padded_bytes(plan, k));
  const void* input = conv_input(plan, k, x, &padded);
  // cuDNN's (F, KH, KW, C) layout, in the convolution's type; dw is float32.
  Scratch filter_grad(static_cast<size_t>(dw.numel()) * dtype_size(k.dtype));
  cudnnHandle_t h = context().cudnn;
  if (!plan.backward_filter.chosen) {
    for_plan(k, "choose a backward-filter algorithm for", [&] {
      DT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, search_math(k.dtype)));
      Scratch search(kSearchWorkspaceBytes);
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> results(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
      int count = 0;
      DT_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          h, plan.x, input, plan.y, dy.raw(), plan.conv, plan.w, filter_grad.get(), static_cast<int>(results.size()),
          &count, results.data(), search.get(), search.bytes()));
      take_best(results, count, k.dtype, plan.backward_filter, "backward-filter");
    });
  }
  DT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.backward_filter.math));
  Scratch workspace(std::max<size_t>(plan.backward_filter.workspace, 256));
  const float alpha = 1.0f, beta = 0.0f;
  DT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &alpha, plan.x, input, plan.y, dy.raw(), plan.conv,
                                                plan.backward_filter.algo, workspace.get(),
                                                plan.backward_filter.workspace, &beta, plan.w, filter_grad.get()));
  by_element_type({&dy}, [&](auto t) {
    using T = decltype(t);
    launch(OhwiToHwioBody<T>{static_cast<const T*>(filter_grad.get()), dw.data(), k.kh * k.kw * k.c, k.f}, dw.numel());
    if (db) column_sums(ElementValue<T>{elements<T>(dy), k.f}, k.n * k.oh * k.ow, k.f, 1.0f, db->data());
  });
}

}  // namespace dtrain::kernels::cuda
