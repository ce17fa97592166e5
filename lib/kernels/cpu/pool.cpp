// Pooling over NHWC: max pooling on own loops, average pooling on oneDNN.
//
// Why own loops for max pooling (measured, one thread, AVX2 EPYC): for the CNN's
// (64,26,26,32) -> (64,13,13,32) 2x2 pool, oneDNN 2.6's pooling_max (jit:avx2)
// with its workspace took 3.9-5.0 ms forward and 2.9-3.7 ms backward, ~40% of the
// whole CNN step, and 0.95 ms forward_inference; these loops take ~0.43 ms
// forward (0.25 ms without the argmax, so inference uses them too) and ~0.41 ms
// backward. They keep oneDNN's/Keras' semantics: padding counts as -inf (it is
// never the maximum), and ties go to the first maximum in window order (row by
// row), so results are deterministic.
//
// Average pooling (which excludes the padding from the count, as Keras does)
// stays on oneDNN's pooling primitive; it needs no workspace.
//
// Both run in float32 or bfloat16 (mixed precision): the max-pooling loops are
// templates over the element type T and compare bfloat16 values as floats.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn.h"
#include "tensor/bfloat16.h"

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
  DT_CHECK(g.kh > 0 && g.kw > 0 && g.sh > 0 && g.sw > 0,
           "pool window and stride must be positive");
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

// Folds one tap (xi, its tap index k) into the running maxima yo and argmaxes ao
// of c channels. Strictly greater, so a tie keeps the earlier tap. The argmax is
// picked with a bit mask and the pointers are restrict: written with a `? :`
// select, or without restrict, GCC 12 left this loop scalar with a branch per
// channel (mispredicted on random data: 5x slower for the CNN's pool).
template <class T, class Idx, bool kArgmax>
inline void max_update(const T* __restrict xi, T* __restrict yo, Idx* __restrict ao,
                       Idx k, int64_t c) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const T xr = xi[ch], yr = yo[ch];
    const bool wins = value_of(xr) > value_of(yr);
    const Idx take = static_cast<Idx>(-static_cast<Idx>(wins));  // all ones if x wins
    yo[ch] = wins ? xr : yr;
    if constexpr (kArgmax) ao[ch] = static_cast<Idx>((ao[ch] & ~take) | (k & take));
  }
}

// One output row (sample b, row oy) of the forward pass. kArgmax=false is the
// inference variant (no workspace). Built for AVX2 and for the baseline, picked
// when the program loads (results are the same bits either way: only compares and
// selects); per row, so the dispatch is not paid per pixel.
template <class T, class Idx, bool kArgmax>
[[gnu::target_clones("avx2", "default")]]
void max_pool_forward_row(const PoolGeom& g, const T* x, T* y, Idx* arg, int64_t row) {
  const int64_t c = g.c;
  const int64_t b = row / g.oh, oy = row % g.oh;
  const int64_t iy0 = oy * g.sh - g.ph;
  const int64_t ky_lo = std::max<int64_t>(0, -iy0), ky_hi = std::min(g.kh, g.h - iy0);
  for (int64_t ox = 0; ox < g.ow; ++ox) {
    const int64_t ix0 = ox * g.sw - g.pw;
    const int64_t kx_lo = std::max<int64_t>(0, -ix0), kx_hi = std::min(g.kw, g.w - ix0);
    const int64_t out = (row * g.ow + ox) * c;
    T* yo = y + out;
    Idx* ao = kArgmax ? arg + out : nullptr;
    bool first = true;
    for (int64_t ky = ky_lo; ky < ky_hi; ++ky)
      for (int64_t kx = kx_lo; kx < kx_hi; ++kx) {
        const T* xi = x + ((b * g.h + iy0 + ky) * g.w + ix0 + kx) * c;
        const Idx k = static_cast<Idx>(ky * g.kw + kx);
        if (first) {
          // The first real tap seeds the maximum, so padding never wins.
          std::memcpy(yo, xi, sizeof(T) * c);
          if constexpr (kArgmax) std::fill(ao, ao + c, k);
          first = false;
          continue;
        }
        max_update<T, Idx, kArgmax>(xi, yo, ao, k, c);
      }
  }
}

// Forward over output rows (n, oy), in parallel: each output element is written
// by one thread.
template <class T, class Idx, bool kArgmax>
void max_pool_forward(const PoolGeom& g, const T* x, T* y, Idx* arg) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < g.n * g.oh; ++row)
    max_pool_forward_row<T, Idx, kArgmax>(g, x, y, arg, row);
}

// dxp[ch] (=, or += when kAdd) dy[ch] for the channels whose argmax is tap k, and
// 0 for the others. A masked update per window vectorises, where a scatter to each
// argmax does not. dy is loaded before the select: a load inside the `? :` is
// conditional, and GCC 12 then leaves the loop scalar.
template <class T, class Idx, bool kAdd>
inline void masked_grad(const T* __restrict dy, const Idx* __restrict arg, Idx k,
                        T* __restrict dxp, int64_t c) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const T d = dy[ch];
    const T g = arg[ch] == k ? d : T(0);  // bfloat16's zero is all zero bits too
    if constexpr (kAdd)
      store(dxp + ch, value_of(dxp[ch]) + value_of(g));
    else
      dxp[ch] = g;
  }
}

// The outputs whose windows contain input index i along one axis: [lo, hi).
struct OutRange {
  int64_t lo, hi;
};
OutRange windows_containing(int64_t i, int64_t pad, int64_t kernel, int64_t stride,
                            int64_t outputs) {
  const int64_t p = i + pad;  // position in the padded input
  // o covers p iff o*stride <= p < o*stride + kernel.
  const int64_t lo = p < kernel ? 0 : (p - kernel) / stride + 1;
  return {lo, std::min(outputs, p / stride + 1)};
}

// One dx row (sample b, input row iy) of the backward pass; `cols` holds the
// output columns whose windows contain each input column. AVX2 and baseline
// clones, as for the forward rows.
template <class T, class Idx>
[[gnu::target_clones("avx2", "default")]]
void max_pool_backward_row(const PoolGeom& g, const T* dy, const Idx* arg, T* dx,
                           const OutRange* cols, int64_t row) {
  const int64_t c = g.c;
  const int64_t b = row / g.h, iy = row % g.h;
  const OutRange rows = windows_containing(iy, g.ph, g.kh, g.sh, g.oh);
  for (int64_t ix = 0; ix < g.w; ++ix) {
    T* d = dx + (row * g.w + ix) * c;
    bool first = true;
    for (int64_t oy = rows.lo; oy < rows.hi; ++oy)
      for (int64_t ox = cols[ix].lo; ox < cols[ix].hi; ++ox) {
        const int64_t out = ((b * g.oh + oy) * g.ow + ox) * c;
        const Idx k = static_cast<Idx>((iy + g.ph - oy * g.sh) * g.kw + (ix + g.pw - ox * g.sw));
        if (first)
          masked_grad<T, Idx, false>(dy + out, arg + out, k, d, c);
        else
          masked_grad<T, Idx, true>(dy + out, arg + out, k, d, c);
        first = false;
      }
    if (first) std::fill(d, d + c, T(0));  // in no window (stride > window, or a cut-off edge)
  }
}

// Backward as a gather: each dx element is the sum, in output order, of the dy of
// the windows that contain it and whose argmax it is (windows overlap when the
// stride is smaller than the window). Each dx row is written once, by one thread,
// with no zeroing pass first; the sums do not depend on the thread count.
template <class T, class Idx>
void max_pool_backward(const PoolGeom& g, const T* dy, const Idx* arg, T* dx) {
  std::vector<OutRange> cols(g.w);
  for (int64_t ix = 0; ix < g.w; ++ix) cols[ix] = windows_containing(ix, g.pw, g.kw, g.sw, g.ow);
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < g.n * g.h; ++row)
    max_pool_backward_row<T, Idx>(g, dy, arg, dx, cols.data(), row);
}

// ---- average pooling (oneDNN) ----

struct AvgPoolPlan {
  memory::desc src, dst;
  dnnl::pooling_forward forward;
  dnnl::pooling_backward backward;
  bool emulated = false;  // float32 in place of bfloat16 (onednn.h)
};

// xt (N, H, W, C) -> yt (N, OH, OW, C), forward and backward, in xt's dtype.
AvgPoolPlan& avg_pool_plan(const Tensor& xt, const Tensor& yt, const Pool2DParams& p) {
  const Shape &x = xt.shape(), &y = yt.shape();
  const std::string key = str("avg_pool:", dtype_name(xt.dtype()), shape_str(x), shape_str(y), p.kernel[0], ",",
                              p.kernel[1], ",", p.stride[0], ",", p.stride[1], ",", p.pad_before[0],
                              ",", p.pad_before[1], ",", p.pad_after[0], ",", p.pad_after[1]);
  return cached<AvgPoolPlan>(key, [&] {
    const Describe describe = [&] {
      return str("an AveragePooling2D ", p.kernel[0], "x", p.kernel[1], " (input ", shape_str(x), ", output ",
                 shape_str(y), ", strides ", p.stride[0], ",", p.stride[1], ") in ", dtype_name(xt.dtype()));
    };
    return make_plan<AvgPoolPlan>(any_bf16({&xt}), describe, [&](bool emulated) {
      AvgPoolPlan plan;
      plan.src = memory::desc({x[0], x[3], x[1], x[2]}, compute_type(xt, emulated), Tag::nhwc);
      plan.dst = memory::desc({y[0], y[3], y[1], y[2]}, compute_type(xt, emulated), Tag::nhwc);
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
  });
}

// The max-pooling loops for element type T (float or bfloat16 bits).
template <class T>
void max_pool_forward_typed(const PoolGeom& g, const T* x, T* y, Workspace* ws) {
  if (!ws) return max_pool_forward<T, uint8_t, false>(g, x, y, nullptr);
  ws->bytes.resize(workspace_bytes(g));
  if (byte_index(g)) return max_pool_forward<T, uint8_t, true>(g, x, y, ws->bytes.data());
  max_pool_forward<T, int32_t, true>(g, x, y, reinterpret_cast<int32_t*>(ws->bytes.data()));
}

template <class T>
void max_pool_backward_typed(const PoolGeom& g, const T* dy, const Workspace& ws, T* dx) {
  DT_CHECK_EQ(ws.bytes.size(), workspace_bytes(g));
  if (byte_index(g)) return max_pool_backward<T, uint8_t>(g, dy, ws.bytes.data(), dx);
  max_pool_backward<T, int32_t>(g, dy, reinterpret_cast<const int32_t*>(ws.bytes.data()), dx);
}

}  // namespace

void pool2d_forward(const Tensor& x, const Pool2DParams& p, Tensor& y, Workspace* ws) {
  const PoolGeom g = pool_geom(x, y, p);
  DT_CHECK(x.dtype() == y.dtype(), "pooling between dtypes");
  if (p.kind == PoolKind::kAverage) {
    auto& plan = avg_pool_plan(x, y, p);
    Staging staging(plan.emulated);
    execute(plan.forward, {{DNNL_ARG_SRC, staging.in(plan.src, x)}, {DNNL_ARG_DST, staging.out(plan.dst, y)}},
            staging);
    return;
  }
  if (x.dtype() == DType::kBF16) return max_pool_forward_typed(g, x.data_bf16(), y.data_bf16(), ws);
  max_pool_forward_typed(g, x.data(), y.data(), ws);
}

void pool2d_backward(const Tensor& dy, const Pool2DParams& p, const Workspace* ws, Tensor& dx) {
  const PoolGeom g = pool_geom(dx, dy, p);
  DT_CHECK(dx.dtype() == dy.dtype(), "pooling between dtypes");
  if (p.kind == PoolKind::kAverage) {
    auto& plan = avg_pool_plan(dx, dy, p);
    Staging staging(plan.emulated);
    execute(plan.backward,
            {{DNNL_ARG_DIFF_DST, staging.in(plan.dst, dy)}, {DNNL_ARG_DIFF_SRC, staging.out(plan.src, dx)}},
            staging);
    return;
  }
  DT_CHECK(ws != nullptr, "pool2d_backward needs the training forward's workspace");
  if (dy.dtype() == DType::kBF16) return max_pool_backward_typed(g, dy.data_bf16(), *ws, dx.data_bf16());
  max_pool_backward_typed(g, dy.data(), *ws, dx.data());
}

}  // namespace dtrain::kernels::cpu
