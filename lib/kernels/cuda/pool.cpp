// Pooling on the GPU: cuDNN's pooling (max, and average excluding padding, as
// Keras does) whenever its symmetric padding gives the layer's output size; own
// kernels (bodies.h: PoolForwardBody, PoolBackwardBody) for the windows cuDNN
// cannot express, Keras' "same" padding with one more row or column after.
// cuDNN's backward needs the forward's input and output: the Workspace keeps
// them (sharing storage, no copies). float32, or bfloat16 / float16 under mixed
// precision (averages summed in float32; max's argmax stays a float32 tensor).
#include <map>
#include <mutex>
#include <tuple>

#include "core/check.h"
#include "core/error.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elements.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/runtime.h"

namespace dtrain::kernels::cuda {
namespace {

// cuDNN will not run this pooling (a window, shape or layout it refuses: cuDNN
// 9's "not supported" family, 3xxx, or a parameter it calls bad): the own
// kernels do. Other statuses (execution, allocation, internal errors, a null or
// misaligned pointer of ours) are failures.
bool cudnn_refuses(cudnnStatus_t status) {
  const int code = static_cast<int>(status);
  return code / 1000 == CUDNN_STATUS_NOT_SUPPORTED / 1000 || status == CUDNN_STATUS_BAD_PARAM ||
         status == CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND || status == CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
}

struct PoolPlan {
  bool use_cudnn = false;
  cudnnPoolingDescriptor_t pool = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
};

// The window over x that gives y, checked as the CPU checks it.
Geometry geometry(const Shape& x, const Shape& y, const Pool2DParams& p) {
  DT_CHECK(x.size() == 4 && y.size() == 4, "pool ranks");
  DT_CHECK_EQ(x[0], y[0]);
  DT_CHECK_EQ(x[3], y[3]);
  DT_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0 && p.stride[0] > 0 && p.stride[1] > 0,
           "pool window and stride must be positive");
  DT_CHECK(p.pad_before[0] < p.kernel[0] && p.pad_after[0] < p.kernel[0] && p.pad_before[1] < p.kernel[1] &&
               p.pad_after[1] < p.kernel[1],
           "pool padding must be smaller than the window");
  DT_CHECK_EQ(y[1], (x[1] + p.pad_before[0] + p.pad_after[0] - p.kernel[0]) / p.stride[0] + 1);
  DT_CHECK_EQ(y[2], (x[2] + p.pad_before[1] + p.pad_after[1] - p.kernel[1]) / p.stride[1] + 1);
  return {x[0], x[1], x[2], x[3], y[1], y[2], p.kernel[0], p.kernel[1], p.stride[0], p.stride[1],
          p.pad_before[0], p.pad_before[1]};
}

PoolPlan make_plan(const Geometry& g, const Pool2DParams& p, DType dtype) {
  PoolPlan plan;
  // Max pooling always runs on the own kernels: their gradient goes to the first
  // maximum of a window, as on the CPU, where cuDNN leaves the tie undocumented
  // (ties are common: windows of zeros after a ReLU). As in PyTorch, which has
  // its own max-pooling kernels too.
  if (p.kind == PoolKind::kMax) return plan;
  if (p.pad_before[0] != p.pad_after[0] || p.pad_before[1] != p.pad_after[1]) return plan;
  DT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&plan.pool));
  DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan.x));
  DT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan.y));
  const cudnnPoolingMode_t mode =
      CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  DT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(plan.pool, mode, CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(g.kh),
                                             static_cast<int>(g.kw), static_cast<int>(g.pt), static_cast<int>(g.pl),
                                             static_cast<int>(g.sh), static_cast<int>(g.sw)));
  const cudnnDataType_t type = cudnn_type(dtype);
  DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.x, CUDNN_TENSOR_NHWC, type, static_cast<int>(g.n),
                                            static_cast<int>(g.c), static_cast<int>(g.h), static_cast<int>(g.w)));
  int n = 0, c = 0, h = 0, w = 0;
  DT_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(plan.pool, plan.x, &n, &c, &h, &w));
  if (h != g.oh || w != g.ow) return PoolPlan{};  // cuDNN's window does not fit: own kernels
  DT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.y, CUDNN_TENSOR_NHWC, type, static_cast<int>(g.n),
                                            static_cast<int>(g.c), static_cast<int>(g.oh), static_cast<int>(g.ow)));
  plan.use_cudnn = true;
  return plan;
}

PoolPlan& plan_for(const Geometry& g, const Pool2DParams& p, DType dtype) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             int64_t, int64_t, int64_t, int64_t, int64_t, int, int>,
                  PoolPlan>
      plans;  // a plan per GPU and dtype
  const auto key = std::make_tuple(current_device(), g.n, g.h, g.w, g.c, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.pt, g.pl,
                                   p.pad_after[0], p.pad_after[1], static_cast<int>(p.kind), static_cast<int>(dtype));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(g, p, dtype)).first;
  return it->second;
}

}  // namespace

void pool2d_forward(const Tensor& x, const Pool2DParams& p, Tensor& y, Workspace* ws) {
  if (x.dim(0) == 0) return;
  DT_CHECK(x.dtype() == y.dtype(), "pool2d_forward: input and output in one dtype");
  const Geometry g = geometry(x.shape(), y.shape(), p);
  PoolPlan& plan = plan_for(g, p, x.dtype());
  const bool max = p.kind == PoolKind::kMax;
  if (plan.use_cudnn) {
    const float alpha = 1.0f, beta = 0.0f;  // float32 scaling factors for every data type here
    const cudnnStatus_t status =
        cudnnPoolingForward(context().cudnn, plan.pool, &alpha, plan.x, x.raw(), &beta, plan.y, y.raw());
    if (status == CUDNN_STATUS_SUCCESS) {
      if (ws) {
        ws->input = x;
        ws->output = y;
      }
      return;
    }
    // cuDNN may refuse some windows (very large global pooling): own kernels from now on.
    if (!cudnn_refuses(status)) throw_cudnn_error("cudnnPoolingForward", status, __FILE__, __LINE__);
    plan.use_cudnn = false;
  }
  if (max && ws && (!ws->argmax.defined() || ws->argmax.shape() != y.shape()))
    ws->argmax = Tensor(y.shape(), y.device());
  Scratch unused(max && !ws ? static_cast<size_t>(y.numel()) * sizeof(float) : 256);
  float* arg = max && ws ? ws->argmax.data() : unused.floats();
  by_element_type({&x, &y}, [&](auto t) {
    using T = decltype(t);
    launch(PoolForwardBody<T>{g, max, elements<T>(x), elements<T>(y), arg}, y.numel());
  });
}

void pool2d_backward(const Tensor& dy, const Pool2DParams& p, const Workspace* ws, Tensor& dx) {
  if (dx.dim(0) == 0) return;
  DT_CHECK(dx.dtype() == dy.dtype(), "pool2d_backward: gradients in one dtype");
  const Geometry g = geometry(dx.shape(), dy.shape(), p);
  PoolPlan& plan = plan_for(g, p, dx.dtype());
  const bool max = p.kind == PoolKind::kMax;
  if (plan.use_cudnn && ws && ws->input.defined()) {
    DT_CHECK(ws->output.defined(), "pool2d_backward needs the forward's workspace");
    const float alpha = 1.0f, beta = 0.0f;
    const cudnnStatus_t status =
        cudnnPoolingBackward(context().cudnn, plan.pool, &alpha, plan.y, ws->output.raw(), plan.y, dy.raw(),
                             plan.x, ws->input.raw(), &beta, plan.x, dx.raw());
    if (status == CUDNN_STATUS_SUCCESS) return;
    // cuDNN ran the forward but refuses the backward: own kernels from now on.
    if (!cudnn_refuses(status)) throw_cudnn_error("cudnnPoolingBackward", status, __FILE__, __LINE__);
    plan.use_cudnn = false;  // average pooling needs nothing from the forward
  }
  DT_CHECK(!max || (ws && ws->argmax.defined()), "max pool2d_backward needs the forward's workspace");
  const float* arg = max ? ws->argmax.data() : nullptr;
  by_element_type({&dy, &dx}, [&](auto t) {
    using T = decltype(t);
    launch(PoolBackwardBody<T>{g, max, elements<T>(dy), arg, elements<T>(dx)}, dx.numel());
  });
}

}  // namespace dtrain::kernels::cuda
