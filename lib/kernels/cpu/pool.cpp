// Pooling over NHWC: max pooling on own loops, average pooling on oneDNN.
//
// Why own loops for max pooling: for the CNN's (64,26,26,32) -> (64,13,13,32)
// pool, oneDNN 2.6's pooling_max forward_training with its workspace took ~3.9 ms
// forward and ~2.9 ms backward on one thread (jit:avx2, ~40% of the whole CNN
// step), and forward_inference ~0.95 ms; a plain NHWC loop that keeps the argmax
// took ~0.14 ms forward and ~0.19 ms backward. The loops keep oneDNN's/Keras'
// semantics: padding counts as -inf (it is never the maximum), and ties go to the
// first maximum in window order (row by row), so results are deterministic.
//
// Average pooling (which excludes the padding from the count, as Keras does)
// stays on oneDNN's pooling primitive; it needs no workspace.
#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn.h"

#include <omp.h>

namespace dtrain::kernels::cpu {
namespace {

using dnnl::memory;

// ---- max pooling (own loops) ----

// The geometry of one pooling call; x (N, H, W, C) -> y (N, OH, OW, C).
struct PoolGeom {
  int64_t n, h, w, c, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;  // window, stride, padding before (top, left)
  int64_t taps() const { return kh * kw; }
};

PoolGeom pool_geom(const Tensor& x, const Tensor& y, const Pool2DParams& p) {
  DT_CHECK(x.rank() == 4 && y.rank() == 4, "pool ranks");
  DT_CHECK_EQ(x.dim(0), y.dim(0));
  DT_CHECK_EQ(x.dim(3), y.dim(3));
  PoolGeom g{x.dim(0), x.dim(1), x.dim(2), x.dim(3), y.dim(1), y.dim(2),
             p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.pad_before[0], p.pad_before[1]};
  DT_CHECK(g.kh > 0 && g.kw > 0 && g.sh > 0 && g.sw > 0, "pool window and stride must be positive");
  // Padding smaller than the window keeps every window at least one real element
  // wide, so each output has a maximum and an argmax.
  DT_CHECK(p.pad_before[0] < g.kh && p.pad_after[0] < g.kh && p.pad_before[1] < g.kw &&
               p.pad_after[1] < g.kw,
           "pool padding must be smaller than the window");
  DT_CHECK_EQ(g.oh, (g.h + p.pad_before[0] + p.pad_after[0] - g.kh) / g.sh + 1);
  DT_CHECK_EQ(g.ow, (g.w + p.pad_before[1] + p.pad_after[1] - g.kw) / g.sw + 1);
  return g;
}

// The argmax of each output element is its tap index ky*KW + kx in the (padded)
// window: one byte when the window has at most 256 taps (every Keras-sized pool),
// else an int32.
bool byte_index(const PoolGeom& g) { return g.taps() <= 256; }
size_t workspace_bytes(const PoolGeom& g) {
  return static_cast<size_t>(g.n * g.oh * g.ow * g.c) * (byte_index(g) ? 1 : sizeof(int32_t));
}

// Forward over output rows (n, oy), in parallel: each output element is written
// by one thread. kArgmax=false is the inference variant (no workspace).
template <class Idx, bool kArgmax>
void max_pool_forward(const PoolGeom& g, const float* x, float* y, Idx* arg) {
  const int64_t c = g.c;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < g.n * g.oh; ++row) {
    const int64_t b = row / g.oh, oy = row % g.oh;
    const int64_t iy0 = oy * g.sh - g.ph;
    const int64_t ky_lo = std::max<int64_t>(0, -iy0), ky_hi = std::min(g.kh, g.h - iy0);
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t ix0 = ox * g.sw - g.pw;
      const int64_t kx_lo = std::max<int64_t>(0, -ix0), kx_hi = std::min(g.kw, g.w - ix0);
      const int64_t out = (row * g.ow + ox) * c;
      float* yo = y + out;
      Idx* ao = kArgmax ? arg + out : nullptr;
      bool first = true;
      for (int64_t ky = ky_lo; ky < ky_hi; ++ky)
        for (int64_t kx = kx_lo; kx < kx_hi; ++kx) {
          const float* xi = x + ((b * g.h + iy0 + ky) * g.w + ix0 + kx) * c;
          const Idx k = static_cast<Idx>(ky * g.kw + kx);
          if (first) {
            // The first real tap seeds the maximum, so padding never wins.
            std::memcpy(yo, xi, sizeof(float) * c);
            if constexpr (kArgmax) std::fill(ao, ao + c, k);
            first = false;
            continue;
          }
          // Strictly greater: a tie keeps the earlier tap. Written as selects so
          // the channel loop vectorises.
          for (int64_t ch = 0; ch < c; ++ch) {
            const bool gt = xi[ch] > yo[ch];
            yo[ch] = gt ? xi[ch] : yo[ch];
            if constexpr (kArgmax) ao[ch] = gt ? k : ao[ch];
          }
        }
    }
  }
}

// Backward: dx = 0, then each dy goes to its window's argmax. Windows overlap when
// the stride is smaller than the window, so one dx element can receive several
// gradients; the work is split by (sample, channel block) so that every dx
// element is accumulated by one thread, in output order (deterministic).
template <class Idx>
void max_pool_backward(const PoolGeom& g, const float* dy, const Idx* arg, float* dx) {
  const int64_t c = g.c;
  // Offset of each tap from its window's origin, in floats of x.
  std::vector<int64_t> tap_offset(g.taps());
  for (int64_t ky = 0; ky < g.kh; ++ky)
    for (int64_t kx = 0; kx < g.kw; ++kx) tap_offset[ky * g.kw + kx] = (ky * g.w + kx) * c;
  // Split channels only when there are fewer samples than threads.
  const int64_t threads = omp_get_max_threads();
  const int64_t blocks = g.n >= threads ? 1 : std::min(c, (threads + g.n - 1) / g.n);
  const int64_t block_c = (c + blocks - 1) / blocks;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * block_c, c1 = std::min(c, c0 + block_c);
      if (c0 >= c1) continue;
      float* dxb = dx + b * g.h * g.w * c;
      for (int64_t i = 0; i < g.h * g.w; ++i) std::fill(dxb + i * c + c0, dxb + i * c + c1, 0.0f);
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t out = ((b * g.oh + oy) * g.ow + ox) * c;
          // The window origin may lie in the padding; origin + tap offset never does.
          const int64_t origin = ((oy * g.sh - g.ph) * g.w + (ox * g.sw - g.pw)) * c;
          for (int64_t ch = c0; ch < c1; ++ch)
            dxb[origin + tap_offset[arg[out + ch]] + ch] += dy[out + ch];
        }
    }
}

// ---- average pooling (oneDNN) ----

struct AvgPoolPlan {
  memory::desc src, dst;
  dnnl::pooling_forward forward;
  dnnl::pooling_backward backward;
};

// x (N, H, W, C) -> y (N, OH, OW, C); the training variant also builds the backward.
AvgPoolPlan& avg_pool_plan(const Shape& x, const Shape& y, const Pool2DParams& p) {
  const std::string key = str("avg_pool:", shape_str(x), shape_str(y), p.kernel[0], ",",
                              p.kernel[1], ",", p.stride[0], ",", p.stride[1], ",", p.pad_before[0],
                              ",", p.pad_before[1], ",", p.pad_after[0], ",", p.pad_after[1]);
  return cached<AvgPoolPlan>(key, [&] {
    AvgPoolPlan plan;
    plan.src = memory::desc({x[0], x[3], x[1], x[2]}, kF32, Tag::nhwc);
    plan.dst = memory::desc({y[0], y[3], y[1], y[2]}, kF32, Tag::nhwc);
    const memory::dims strides = {p.stride[0], p.stride[1]}, kernel = {p.kernel[0], p.kernel[1]},
                       pad_l = {p.pad_before[0], p.pad_before[1]},
                       pad_r = {p.pad_after[0], p.pad_after[1]};
    const auto alg = dnnl::algorithm::pooling_avg_exclude_padding;
    // Average pooling has no workspace, so one forward_training primitive serves
    // training and inference alike, and hints the backward.
    const dnnl::pooling_forward::primitive_desc forward_pd(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, alg, plan.src, plan.dst,
                                    strides, kernel, pad_l, pad_r),
        engine());
    plan.forward = dnnl::pooling_forward(forward_pd);
    plan.backward = dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(
        dnnl::pooling_backward::desc(alg, plan.src, plan.dst, strides, kernel, pad_l, pad_r),
        engine(), forward_pd));
    return plan;
  });
}

}  // namespace

void pool2d_forward(const Tensor& x, const Pool2DParams& p, Tensor& y, Workspace* ws) {
  const PoolGeom g = pool_geom(x, y, p);
  if (p.kind == PoolKind::kAverage) {
    auto& plan = avg_pool_plan(x.shape(), y.shape(), p);
    execute(plan.forward, {{DNNL_ARG_SRC, as_memory(plan.src, x)}, {DNNL_ARG_DST, as_memory(plan.dst, y)}});
    return;
  }
  if (!ws) {
    max_pool_forward<uint8_t, false>(g, x.data(), y.data(), nullptr);
    return;
  }
  ws->bytes.resize(workspace_bytes(g));
  if (byte_index(g))
    max_pool_forward<uint8_t, true>(g, x.data(), y.data(), ws->bytes.data());
  else
    max_pool_forward<int32_t, true>(g, x.data(), y.data(),
                                    reinterpret_cast<int32_t*>(ws->bytes.data()));
}

void pool2d_backward(const Tensor& dy, const Pool2DParams& p, const Workspace* ws, Tensor& dx) {
  const PoolGeom g = pool_geom(dx, dy, p);
  if (p.kind == PoolKind::kAverage) {
    auto& plan = avg_pool_plan(dx.shape(), dy.shape(), p);
    execute(plan.backward,
            {{DNNL_ARG_DIFF_DST, as_memory(plan.dst, dy)}, {DNNL_ARG_DIFF_SRC, as_memory(plan.src, dx)}});
    return;
  }
  DT_CHECK(ws != nullptr, "pool2d_backward needs the training forward's workspace");
  DT_CHECK_EQ(ws->bytes.size(), workspace_bytes(g));
  if (byte_index(g))
    max_pool_backward<uint8_t>(g, dy.data(), ws->bytes.data(), dx.data());
  else
    max_pool_backward<int32_t>(g, dy.data(), reinterpret_cast<const int32_t*>(ws->bytes.data()),
                               dx.data());
}

}  // namespace dtrain::kernels::cpu
