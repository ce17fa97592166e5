// Max and average pooling on oneDNN's pooling primitives (NHWC).
//
// Max pooling in training keeps oneDNN's workspace (where each maximum came from)
// in a Workspace owned by the layer, and hands it back for the backward pass.
#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn.h"

namespace dtrain::kernels::cpu {
namespace {

using dnnl::memory;

struct PoolPlan {
  memory::desc src, dst, workspace;
  dnnl::pooling_forward::primitive_desc forward_pd;
  dnnl::pooling_forward forward;
  dnnl::pooling_backward backward;
  bool has_backward = false;
};

dnnl::algorithm pool_algorithm(PoolKind kind) {
  return kind == PoolKind::kMax ? dnnl::algorithm::pooling_max
                                : dnnl::algorithm::pooling_avg_exclude_padding;
}

// x (N, H, W, C) -> y (N, OH, OW, C). `training` selects the variant with a workspace.
PoolPlan& pool_plan(const Shape& x, const Shape& y, const Pool2DParams& p, bool training) {
  const std::string key = str("pool:", shape_str(x), shape_str(y), static_cast<int>(p.kind), ",",
                              p.kernel[0], ",", p.kernel[1], ",", p.stride[0], ",", p.stride[1],
                              ",", p.pad_before[0], ",", p.pad_before[1], ",", p.pad_after[0], ",",
                              p.pad_after[1], ",", training);
  return cached<PoolPlan>(key, [&] {
    PoolPlan plan;
    plan.src = memory::desc({x[0], x[3], x[1], x[2]}, kF32, Tag::nhwc);
    plan.dst = memory::desc({y[0], y[3], y[1], y[2]}, kF32, Tag::nhwc);
    const memory::dims strides = {p.stride[0], p.stride[1]}, kernel = {p.kernel[0], p.kernel[1]},
                       pad_l = {p.pad_before[0], p.pad_before[1]},
                       pad_r = {p.pad_after[0], p.pad_after[1]};
    const auto prop = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    plan.forward_pd = dnnl::pooling_forward::primitive_desc(
        dnnl::pooling_forward::desc(prop, pool_algorithm(p.kind), plan.src, plan.dst, strides,
                                    kernel, pad_l, pad_r),
        engine());
    plan.forward = dnnl::pooling_forward(plan.forward_pd);
    plan.workspace = plan.forward_pd.workspace_desc();
    if (training) {
      plan.backward = dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(
          dnnl::pooling_backward::desc(pool_algorithm(p.kind), plan.src, plan.dst, strides, kernel,
                                       pad_l, pad_r),
          engine(), plan.forward_pd));
      plan.has_backward = true;
    }
    return plan;
  });
}

}  // namespace

void pool2d_forward(const Tensor& x, const Pool2DParams& p, Tensor& y, Workspace* ws) {
  DT_CHECK(x.rank() == 4 && y.rank() == 4, "pool ranks");
  DT_CHECK_EQ(x.dim(3), y.dim(3));
  auto& plan = pool_plan(x.shape(), y.shape(), p, ws != nullptr);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, as_memory(plan.src, x)},
                                          {DNNL_ARG_DST, as_memory(plan.dst, y)}};
  if (ws) {
    ws->bytes.resize(plan.workspace.get_size());
    if (!ws->bytes.empty())
      args.emplace(DNNL_ARG_WORKSPACE, memory(plan.workspace, engine(), ws->bytes.data()));
  }
  execute(plan.forward, args);
}

void pool2d_backward(const Tensor& dy, const Pool2DParams& p, const Workspace* ws, Tensor& dx) {
  DT_CHECK(dy.rank() == 4 && dx.rank() == 4, "pool ranks");
  DT_CHECK(ws != nullptr, "pool2d_backward needs the training forward's workspace");
  auto& plan = pool_plan(dx.shape(), dy.shape(), p, true);
  std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, as_memory(plan.dst, dy)},
                                          {DNNL_ARG_DIFF_SRC, as_memory(plan.src, dx)}};
  if (plan.workspace.get_size() > 0) {
    DT_CHECK_EQ(ws->bytes.size(), plan.workspace.get_size());
    args.emplace(DNNL_ARG_WORKSPACE,
                 memory(plan.workspace, engine(), const_cast<uint8_t*>(ws->bytes.data())));
  }
  execute(plan.backward, args);
}

}  // namespace dtrain::kernels::cpu
