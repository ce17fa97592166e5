// The bodies of dtrain's own CUDA kernels: one small struct per kernel whose
// operator()(i) does the work of index i. On the GPU, launch.cuh runs
// body(i) for every i in [0, n) (a grid-stride loop); the same bodies compile
// with the host compiler, so tests run them on the CPU over every index and
// compare with the CPU backend. No CUDA header is needed here, and no body uses
// shared memory, atomics or synchronisation (NonFiniteFlagBody's indexes may
// race, all writing the same value): reductions are two passes (partial
// sums per chunk of rows, then the chunk sums), gradients of pooling are
// gathered per input element, so every output element is written by one index.
//
// Layouts follow ops.h: activations NHWC (channels last, so the channel of flat
// element i is i % C), Dense rows (N, features).
#pragma once

#include <math.h>

#include <cstdint>

#include "core/host_device.h"
#include "core/rng.h"
#include "kernels/element_math.h"
#include "tensor/bfloat16.h"
#include "tensor/float16.h"

namespace dtrain::kernels::cuda {

// ---- point-wise ----

struct FillBody {
  float* x;
  float value;
  DT_HOST_DEVICE void operator()(int64_t i) const { x[i] = value; }
};

// y = act(y + bias[channel]); bias may be null.   y (rows, cols)
// Bodies templated on T (float, or bf16_bits / f16_bits for mixed precision)
// compute in float32 and store in T: value_of / store of tensor/bfloat16.h and
// tensor/float16.h.
template <class T>
struct BiasActivationBody {
  T* y;
  const float* bias;
  int64_t cols;
  Activation act;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    const float v = value_of(y[i]) + (bias ? bias[i % cols] : 0.0f);
    store(&y[i], math::activate(act, v));
  }
};

template <class T>
struct ActivationForwardBody {
  const T* x;
  T* y;
  Activation act;
  DT_HOST_DEVICE void operator()(int64_t i) const { store(&y[i], math::activate(act, value_of(x[i]))); }
};

template <class T>
struct ActivationBackwardBody {
  const T* y;
  const T* dy;
  T* dx;
  Activation act;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    store(&dx[i], math::activation_grad(act, value_of(y[i]), value_of(dy[i])));
  }
};

// Softmax over each row of `cols` values; index = row.
struct SoftmaxRowsBody {
  const float* x;
  float* y;
  int64_t cols;
  DT_HOST_DEVICE void operator()(int64_t r) const {
    const float* in = x + r * cols;
    float* out = y + r * cols;
    float m = in[0];
    for (int64_t j = 1; j < cols; ++j) m = in[j] > m ? in[j] : m;
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      out[j] = ::expf(in[j] - m);
      sum += out[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < cols; ++j) out[j] *= inv;
  }
};

// dx = y * (dy - sum(dy * y)) per row; index = row. dx may alias dy.
struct SoftmaxBackwardRowsBody {
  const float* y;
  const float* dy;
  float* dx;
  int64_t cols;
  DT_HOST_DEVICE void operator()(int64_t r) const {
    const int64_t o = r * cols;
    float dot = 0.0f;
    for (int64_t j = 0; j < cols; ++j) dot += dy[o + j] * y[o + j];
    for (int64_t j = 0; j < cols; ++j) dx[o + j] = y[o + j] * (dy[o + j] - dot);
  }
};

// Inverted dropout with the CPU backend's mask: a pure function of (seed, i).
// The mask is float32 whatever T is.
template <class T>
struct DropoutBody {
  const T* x;
  T* y;
  float* mask;
  float rate;
  uint64_t seed;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    mask[i] = dropout_multiplier(seed, static_cast<uint64_t>(i), rate);
    store(&y[i], value_of(x[i]) * mask[i]);
  }
};

// out = a * b, b float32 (a dropout mask).
template <class T>
struct MultiplyBody {
  const T* a;
  const float* b;
  T* out;
  DT_HOST_DEVICE void operator()(int64_t i) const { store(&out[i], value_of(a[i]) * b[i]); }
};

struct AxpyBody {
  float alpha;
  const float* x;
  float* y;
  DT_HOST_DEVICE void operator()(int64_t i) const { y[i] += alpha * x[i]; }
};

// float32 <-> bfloat16 (round to nearest even, as the CPU's cast).
// float32 to a 16-bit type T (bf16_bits, f16_bits), rounded to nearest even, and back.
template <class T>
struct CastToBody {
  const float* x;
  T* y;
  DT_HOST_DEVICE void operator()(int64_t i) const { store(&y[i], x[i]); }
};

template <class T>
struct CastFromBody {
  const T* x;
  float* y;
  DT_HOST_DEVICE void operator()(int64_t i) const { y[i] = value_of(x[i]); }
};

using CastToBf16Body = CastToBody<bf16_bits>;
using CastFromBf16Body = CastFromBody<bf16_bits>;
using CastToF16Body = CastToBody<f16_bits>;
using CastFromF16Body = CastFromBody<f16_bits>;

// *flag = 1 when x[i] is inf or NaN. Every index that writes writes the same
// value, so the race between them is harmless: no atomics needed.
struct NonFiniteFlagBody {
  const float* x;
  float* flag;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    if (!isfinite(x[i])) *flag = 1.0f;
  }
};

struct DivideBody {
  float* x;
  float divisor;
  DT_HOST_DEVICE void operator()(int64_t i) const { x[i] /= divisor; }
};

struct MovingAverageBody {
  float* avg;
  const float* x;
  float momentum;
  DT_HOST_DEVICE void operator()(int64_t i) const { avg[i] = momentum * avg[i] + (1.0f - momentum) * x[i]; }
};

// ---- losses and optimizers ----

// One row per index: the loss, the hit flag and the gradient of row r.
struct ClassLossBody {
  LossKind kind;
  const float* output;
  const float* labels;
  int64_t cols;
  float scale;
  float* row_loss;
  float* row_hit;
  float* grad;  // may be null
  DT_HOST_DEVICE void operator()(int64_t r) const {
    bool hit = false;
    row_loss[r] = static_cast<float>(math::class_row_loss(kind, output + r * cols, cols,
                                                          static_cast<int32_t>(labels[r]),
                                                          grad ? grad + r * cols : nullptr, scale, &hit));
    row_hit[r] = hit ? 1.0f : 0.0f;
  }
};

struct SgdBody {
  float* w;
  const float* g;
  float* v;  // null without momentum
  SgdCoeffs k;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    float unused = 0.0f;
    math::sgd_element(w[i], g[i], v ? v[i] : unused, k);
  }
};

struct AdamBody {
  float* w;
  const float* g;
  float* m;
  float* v;
  AdamCoeffs k;
  DT_HOST_DEVICE void operator()(int64_t i) const { math::adam_element(w[i], g[i], m[i], v[i], k); }
};

struct RmspropBody {
  float* w;
  const float* g;
  float* v;
  float* m;  // null without momentum
  float* a;  // null unless centered
  RmspropCoeffs k;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    float unused_m = 0.0f, unused_a = 0.0f;
    math::rmsprop_element(w[i], g[i], v[i], m ? m[i] : unused_m, a ? a[i] : unused_a, k);
  }
};

struct AdagradBody {
  float* w;
  const float* g;
  float* a;
  AdagradCoeffs k;
  DT_HOST_DEVICE void operator()(int64_t i) const { math::adagrad_element(w[i], g[i], a[i], k); }
};

// ---- gradient clipping ----

// Parts of pass 1 of a sum of squares: about 256 elements each, at most 4096 parts.
inline int64_t square_sum_parts(int64_t n) {
  const int64_t parts = n / 256;
  return parts < 1 ? 1 : (parts > 4096 ? 4096 : parts);
}

// Pass 1: index = part; partial[part] = sum of x[i]^2 over i = part, part + parts,
// ... (adjacent indices read adjacent elements: coalesced).
struct SquareSumPartBody {
  const float* x;
  int64_t n;
  int64_t parts;
  float* partial;
  DT_HOST_DEVICE void operator()(int64_t part) const {
    double s = 0.0;
    for (int64_t i = part; i < n; i += parts) s += static_cast<double>(x[i]) * x[i];
    partial[part] = static_cast<float>(s);
  }
};

// One index: out[0] = the sum of x[0..n) (in double, in order). Pass 2 of a sum of
// squares, and the total of clip_by_norm's sums of squares.
struct SumBody {
  const float* x;
  int64_t n;
  float* out;
  DT_HOST_DEVICE void operator()(int64_t) const {
    double s = 0.0;
    for (int64_t k = 0; k < n; ++k) s += x[k];
    out[0] = static_cast<float>(s);
  }
};

// x = x * clip / max(sqrt(total[0]), clip); total is a device scalar (SumBody's out).
struct ClipByNormBody {
  float* x;
  const float* total;
  float clip;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    x[i] = math::clip_by_norm_element(x[i], ::sqrtf(total[0]), clip);
  }
};

struct ClipByValueBody {
  float* x;
  float limit;
  DT_HOST_DEVICE void operator()(int64_t i) const { x[i] = math::clip_by_value_element(x[i], limit); }
};

// ---- column sums over rows (bias gradients, batch-norm statistics) ----

// Values summed per column: x[r][c].
template <class T>
struct ElementValue {
  const T* x;
  int64_t cols;
  DT_HOST_DEVICE float operator()(int64_t r, int64_t c) const { return value_of(x[r * cols + c]); }
};

// (x[r][c] - mean[c])^2
struct CenteredSquareValue {
  const float* x;
  const float* mean;
  int64_t cols;
  DT_HOST_DEVICE float operator()(int64_t r, int64_t c) const {
    const float d = x[r * cols + c] - mean[c];
    return d * d;
  }
};

// dy[r][c] * (x[r][c] - mean[c])
struct CenteredProductValue {
  const float* dy;
  const float* x;
  const float* mean;
  int64_t cols;
  DT_HOST_DEVICE float operator()(int64_t r, int64_t c) const {
    return dy[r * cols + c] * (x[r * cols + c] - mean[c]);
  }
};

// Pass 1: index = chunk * cols + c; partial[chunk][c] = sum of value(r, c) over
// the chunk's rows. Adjacent indices read adjacent columns (coalesced).
template <class Value>
struct ColumnChunkSumBody {
  Value value;
  int64_t rows;
  int64_t cols;
  int64_t chunk_rows;
  float* partial;  // (chunks, cols)
  DT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t c = i % cols, chunk = i / cols;
    const int64_t begin = chunk * chunk_rows;
    const int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
    float s = 0.0f;
    for (int64_t r = begin; r < end; ++r) s += value(r, c);
    partial[i] = s;
  }
};

// Rows per chunk in pass 1: about 64k threads, each summing at least 16 rows.
inline int64_t column_chunk_rows(int64_t rows, int64_t cols) {
  const int64_t per_col = cols > 0 ? 65536 / cols : 1;
  const int64_t chunks_wanted = per_col > 1 ? per_col : 1;
  const int64_t r = (rows + chunks_wanted - 1) / chunks_wanted;
  return r > 16 ? r : 16;
}

// Pass 2: index = c; out[c] = scale * sum over chunks of partial[chunk][c] (in
// double, chunk order: the same result for any launch shape).
struct ColumnFinishBody {
  const float* partial;
  int64_t chunks;
  int64_t cols;
  float scale;
  float* out;
  DT_HOST_DEVICE void operator()(int64_t c) const {
    double s = 0.0;
    for (int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
    out[c] = static_cast<float>(s * scale);
  }
};

// ---- batch normalization over the channels (last) axis ----

// y = gamma * (x - mean) / sqrt(var + eps) + beta
struct BatchNormApplyBody {
  const float* x;
  float* y;
  const float* mean;
  const float* variance;
  const float* gamma;
  const float* beta;
  float epsilon;
  int64_t cols;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t c = i % cols;
    const float inv_std = 1.0f / ::sqrtf(variance[c] + epsilon);
    y[i] = gamma[c] * (x[i] - mean[c]) * inv_std + beta[c];
  }
};

// dx from the sums dbeta = sum(dy) and dxc = sum(dy * (x - mean)) (per channel):
// dx = gamma * inv_std / M * (M * dy - dbeta - (x - mean) * inv_std^2 * dxc)
struct BatchNormBackwardBody {
  const float* x;
  const float* dy;
  const float* mean;
  const float* variance;
  const float* gamma;
  const float* dbeta;
  const float* dxc;
  float epsilon;
  int64_t cols;
  int64_t rows;
  float* dx;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t c = i % cols;
    const float inv_std = 1.0f / ::sqrtf(variance[c] + epsilon);
    const float m = static_cast<float>(rows);
    dx[i] = gamma[c] * inv_std / m *
            (m * dy[i] - dbeta[c] - (x[i] - mean[c]) * inv_std * inv_std * dxc[c]);
  }
};

// dgamma[c] = dxc[c] * inv_std[c]
struct BatchNormGammaGradBody {
  const float* dxc;
  const float* variance;
  float epsilon;
  float* dgamma;
  DT_HOST_DEVICE void operator()(int64_t c) const { dgamma[c] = dxc[c] / ::sqrtf(variance[c] + epsilon); }
};

// ---- layouts ----

// NHWC geometry of an image batch and a window over it.
struct Geometry {
  int64_t n, h, w, c;     // input
  int64_t oh, ow;         // output
  int64_t kh, kw;         // window
  int64_t sh, sw;         // strides
  int64_t pt, pl;         // padding before (top, left)
};

// dst (N, H+pt+pb, W+pl+pr, C) = src (N, H, W, C) with zero borders; index = dst element.
template <class T>
struct PadBody {
  const T* src;
  T* dst;
  int64_t h, w, c;        // src
  int64_t ph, pw;         // dst height, width
  int64_t pt, pl;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t ch = i % c;
    const int64_t x = (i / c) % pw;
    const int64_t y = (i / (c * pw)) % ph;
    const int64_t b = i / (c * pw * ph);
    const int64_t sy = y - pt, sx = x - pl;
    if (sy >= 0 && sy < h && sx >= 0 && sx < w) dst[i] = src[((b * h + sy) * w + sx) * c + ch];
    else store(&dst[i], 0.0f);
  }
};

// dst (N, H, W, C) = the interior of src (N, H+pt+pb, W+pl+pr, C); index = dst element.
template <class T>
struct CropBody {
  const T* src;
  T* dst;
  int64_t h, w, c;        // dst
  int64_t ph, pw;         // src height, width
  int64_t pt, pl;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t ch = i % c;
    const int64_t x = (i / c) % w;
    const int64_t y = (i / (c * w)) % h;
    const int64_t b = i / (c * w * h);
    dst[i] = src[((b * ph + y + pt) * pw + x + pl) * c + ch];
  }
};

// Keras' (KH, KW, C, F) kernel to cuDNN's (F, KH, KW, C); index = dst element.
template <class T>
struct HwioToOhwiBody {
  const T* src;
  T* dst;
  int64_t rsc;  // KH*KW*C
  int64_t f;
  DT_HOST_DEVICE void operator()(int64_t i) const { dst[i] = src[(i % rsc) * f + i / rsc]; }
};

// cuDNN's (F, KH, KW, C) back to Keras' (KH, KW, C, F), in float32 (a weight
// gradient: cuDNN's is in the convolution's type); index = dst element.
template <class T>
struct OhwiToHwioBody {
  const T* src;
  float* dst;
  int64_t rsc;
  int64_t f;
  DT_HOST_DEVICE void operator()(int64_t i) const { dst[i] = value_of(src[(i % f) * rsc + i / f]); }
};

// ---- pooling (for windows cuDNN cannot express: asymmetric padding) ----

// index = output element (b, oy, ox, ch); writes y and, for max, the argmax as the
// flat window position (ky * kw + kx) in `arg` (a float: windows are small).
template <class T>
struct PoolForwardBody {
  Geometry g;
  bool max;
  const T* x;
  T* y;
  float* arg;  // max only
  DT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t ch = i % g.c;
    const int64_t ox = (i / g.c) % g.ow;
    const int64_t oy = (i / (g.c * g.ow)) % g.oh;
    const int64_t b = i / (g.c * g.ow * g.oh);
    float best = -INFINITY, sum = 0.0f;
    int64_t best_k = -1, count = 0;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = oy * g.sh - g.pt + ky;
      if (iy < 0 || iy >= g.h) continue;
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t ix = ox * g.sw - g.pl + kx;
        if (ix < 0 || ix >= g.w) continue;
        const float v = value_of(x[((b * g.h + iy) * g.w + ix) * g.c + ch]);
        if (v > best || best_k < 0) {
          best = v;
          best_k = ky * g.kw + kx;
        }
        sum += v;
        ++count;
      }
    }
    if (max) {
      store(&y[i], best_k < 0 ? 0.0f : best);
      arg[i] = static_cast<float>(best_k);
    } else {
      store(&y[i], count ? sum / static_cast<float>(count) : 0.0f);
    }
  }
};

// index = input element (b, iy, ix, ch): dx = sum of dy over the windows that
// hold it (max: only where it was the argmax; average: dy / window count).
template <class T>
struct PoolBackwardBody {
  Geometry g;
  bool max;
  const T* dy;
  const float* arg;  // max only
  T* dx;
  DT_HOST_DEVICE int64_t window_count(int64_t oy, int64_t ox) const {
    int64_t rows = 0, cols = 0;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = oy * g.sh - g.pt + ky;
      rows += iy >= 0 && iy < g.h;
    }
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t ix = ox * g.sw - g.pl + kx;
      cols += ix >= 0 && ix < g.w;
    }
    return rows * cols;
  }
  DT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t ch = i % g.c;
    const int64_t ix = (i / g.c) % g.w;
    const int64_t iy = (i / (g.c * g.w)) % g.h;
    const int64_t b = i / (g.c * g.w * g.h);
    float sum = 0.0f;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t ty = iy + g.pt - ky;  // = oy * sh
      if (ty < 0 || ty % g.sh != 0) continue;
      const int64_t oy = ty / g.sh;
      if (oy >= g.oh) continue;
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t tx = ix + g.pl - kx;
        if (tx < 0 || tx % g.sw != 0) continue;
        const int64_t ox = tx / g.sw;
        if (ox >= g.ow) continue;
        const int64_t o = ((b * g.oh + oy) * g.ow + ox) * g.c + ch;
        if (max) {
          if (static_cast<int64_t>(arg[o]) == ky * g.kw + kx) sum += value_of(dy[o]);
        } else {
          sum += value_of(dy[o]) / static_cast<float>(window_count(oy, ox));
        }
      }
    }
    store(&dx[i], sum);
  }
};

}  // namespace dtrain::kernels::cuda
