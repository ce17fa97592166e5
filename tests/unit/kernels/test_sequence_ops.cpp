// The transformer ops of the CPU backend against plain reference loops written
// here (attention with its whole (T, T) softmax materialised, layer norm and
// gelu by their formulas, gradients by finite differences), and the CUDA
// kernels' bodies (kernels/cuda/sequence_bodies.h) run on the host over every
// index against the CPU backend, and the GPU's cuBLASLt attention
// (kernels/cuda/attention_steps.h) with its products as host loops. Sequence lengths that are not multiples of
// the CPU's 64-row blocks exercise the partial blocks.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/cuda/attention_steps.h"
#include "kernels/cuda/bodies.h"
#include "kernels/cuda/sequence_bodies.h"
#include "kernels/ops.h"
#include "unit/finite_difference.h"
#include "unit/kernels/run_on_host.h"
#include "unit/tensor_checks.h"

using namespace dtrain;
using kernels::Activation;
using kernels::AttentionParams;
using testing::random_tensor;
using testing::require_close;
using testing::run_on_host;

namespace {


// out (N, T, H, dv) by the textbook formula: (softmax(scale q k^T + mask) * Z) v, in
// double, Z the dropout multipliers (all 1 without dropout).
Tensor reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p) {
  const int64_t n = q.dim(0), t = q.dim(1), h = p.heads, dk = q.dim(3), dv = v.dim(3);
  Tensor out({n, t, h, dv});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t head = 0; head < h; ++head)
      for (int64_t i = 0; i < t; ++i) {
        std::vector<double> s(static_cast<size_t>(t), -INFINITY);
        double top = -INFINITY;
        for (int64_t j = 0; j < (p.causal ? i + 1 : t); ++j) {
          double dot = 0;
          for (int64_t c = 0; c < dk; ++c)
            dot += q.data()[((b * t + i) * h + head) * dk + c] * k.data()[((b * t + j) * h + head) * dk + c];
          s[j] = dot * p.scale;
          top = std::max(top, s[j]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - top));
        if (p.dropout > 0.0f)
          for (int64_t j = 0; j < t; ++j)
            s[j] *= dropout_multiplier(p.seed, static_cast<uint64_t>(((b * h + head) * t + i) * t + j), p.dropout);
        for (int64_t c = 0; c < dv; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < t; ++j) acc += s[j] / sum * v.data()[((b * t + j) * h + head) * dv + c];
          out.data()[((b * t + i) * h + head) * dv + c] = static_cast<float>(acc);
        }
      }
  return out;
}

double weighted_sum(const Tensor& y, const Tensor& w) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.data()[i]) * w.data()[i];
  return s;
}

}  // namespace

TEST_CASE("blocked attention equals the materialised softmax, causal or not, with partial blocks and dropout") {
  for (const bool causal : {true, false})
    for (const float dropout : {0.0f, 0.25f})
    for (const int64_t t : {1, 5, 64, 70, 131}) {
      CAPTURE(causal, dropout, t);
      const int64_t n = 2, h = 3, dk = 8, dv = 5;
      const AttentionParams p{h, 1.0f / std::sqrt(8.0f), causal, dropout, 77};
      const Tensor q = random_tensor({n, t, h, dk}, 1, -2, 2), k = random_tensor({n, t, h, dk}, 2, -2, 2),
                   v = random_tensor({n, t, h, dv}, 3);
      Tensor out({n, t, h, dv}), lse({n, h, t});
      kernels::attention_forward(q, k, v, p, out, lse);
      require_close(out, reference_attention(q, k, v, p), 2e-5, 1e-4);
    }
}

TEST_CASE("attention's backward matches finite differences of the forward, with and without dropout") {
  for (const bool causal : {true, false})
  for (const float dropout : {0.0f, 0.3f}) {
    CAPTURE(causal, dropout);
    const int64_t n = 1, t = 67, h = 2, dk = 4, dv = 3;
    const AttentionParams p{h, 0.5f, causal, dropout, 5};
    Tensor q = random_tensor({n, t, h, dk}, 4), k = random_tensor({n, t, h, dk}, 5), v = random_tensor({n, t, h, dv}, 6);
    const Tensor w = random_tensor({n, t, h, dv}, 7);  // the objective: sum(w * out)
    Tensor out({n, t, h, dv}), lse({n, h, t}), dq(q.shape()), dk_(k.shape()), dv_(v.shape());
    kernels::attention_forward(q, k, v, p, out, lse);
    kernels::attention_backward(q, k, v, out, lse, w, p, dq, dk_, dv_);
    auto objective = [&] {
      Tensor o({n, t, h, dv}), l({n, h, t});
      kernels::attention_forward(q, k, v, p, o, l);
      return weighted_sum(o, w);
    };
    for (auto [x, g] : {std::pair<Tensor*, Tensor*>{&q, &dq}, {&k, &dk_}, {&v, &dv_}}) {
      for (const int64_t i : {int64_t{0}, x->numel() / 2 + 1, x->numel() - 1}) {
        const double numeric = testing::central_difference(x->data()[i], objective);
        INFO("element " << i << " of " << x->numel());
        CHECK(g->data()[i] == Approx(numeric).margin(2e-3).epsilon(0.02));
      }
    }
  }
}

TEST_CASE("layer norm and gelu follow their formulas, and their gradients finite differences") {
  const Tensor x = random_tensor({6, 10}, 8, -3, 3), gamma = random_tensor({10}, 9), beta = random_tensor({10}, 10);
  Tensor y({6, 10}), mean({6}), rstd({6});
  kernels::layer_norm_forward(x, &gamma, &beta, 1e-3f, y, mean, rstd);
  for (int64_t r = 0; r < 6; ++r) {
    double m = 0, var = 0;
    for (int64_t j = 0; j < 10; ++j) m += x.data()[r * 10 + j] / 10.0;
    for (int64_t j = 0; j < 10; ++j) var += std::pow(x.data()[r * 10 + j] - m, 2) / 10.0;
    for (int64_t j = 0; j < 10; ++j)
      CHECK(y.data()[r * 10 + j] ==
            Approx((x.data()[r * 10 + j] - m) / std::sqrt(var + 1e-3) * gamma.data()[j] + beta.data()[j]).margin(1e-5));
  }
  const Tensor w = random_tensor({6, 10}, 11);
  Tensor dx({6, 10}), dgamma({10}), dbeta({10});
  kernels::layer_norm_backward(x, w, &gamma, mean, rstd, dx, &dgamma, &dbeta);
  Tensor xp = x.clone();
  for (const int64_t i : {0, 17, 59}) {
    auto at = [&](float delta) {
      xp.data()[i] = x.data()[i] + delta;
      Tensor yy({6, 10}), mm({6}), ss({6});
      kernels::layer_norm_forward(xp, &gamma, &beta, 1e-3f, yy, mm, ss);
      return weighted_sum(yy, w);
    };
    CHECK(dx.data()[i] == Approx((at(1e-2f) - at(-1e-2f)) / 2e-2).margin(2e-3).epsilon(0.02));
    xp.data()[i] = x.data()[i];
  }
  double dbeta0 = 0;
  for (int64_t r = 0; r < 6; ++r) dbeta0 += w.data()[r * 10];
  CHECK(dbeta.data()[0] == Approx(dbeta0));

  for (const Activation act : {Activation::kGelu, Activation::kGeluTanh}) {
    Tensor g({6, 10}), dg({6, 10});
    kernels::activation_forward(act, x, g);
    const double x0 = x.data()[3];
    const double exact = 0.5 * x0 * (1 + std::erf(x0 / std::sqrt(2.0)));
    const double tanh = 0.5 * x0 * (1 + std::tanh(std::sqrt(2 / M_PI) * (x0 + 0.044715 * x0 * x0 * x0)));
    CHECK(g.data()[3] == Approx(act == Activation::kGelu ? exact : tanh).margin(1e-6));
    kernels::activation_backward_from_input(act, x, w, dg);
    Tensor a({1}), b({1});
    Tensor xu({1}), xd({1});
    xu.data()[0] = static_cast<float>(x0 + 1e-3);
    xd.data()[0] = static_cast<float>(x0 - 1e-3);
    kernels::activation_forward(act, xu, a);
    kernels::activation_forward(act, xd, b);
    CHECK(dg.data()[3] == Approx(w.data()[3] * (a.data()[0] - b.data()[0]) / 2e-3).margin(2e-3));
  }
}

TEST_CASE("the embedding gathers rows by id and adds gradients back per id, a bad id is an IoError") {
  const Tensor table = random_tensor({5, 3}, 12);
  Tensor ids({4});
  const float id_values[] = {2, 0, 2, 4};
  std::copy(id_values, id_values + 4, ids.data());
  Tensor y({4, 3});
  kernels::embedding_forward(ids, table, y);
  CHECK(y.data()[0] == table.data()[6]);
  CHECK(y.data()[11] == table.data()[14]);
  const Tensor dy = random_tensor({4, 3}, 13);
  Tensor dtable({5, 3});
  dtable.fill(7.0f);  // overwritten
  kernels::embedding_backward(ids, dy, dtable);
  CHECK(dtable.data()[6] == Approx(dy.data()[0] + dy.data()[6]));
  CHECK(dtable.data()[3] == 0.0f);  // id 1 does not occur
  ids.data()[1] = 5.0f;
  CHECK_THROWS_AS(kernels::embedding_forward(ids, table, y), IoError);
  ids.data()[1] = 1.5f;
  CHECK_THROWS_AS(kernels::embedding_forward(ids, table, y), IoError);
}

TEST_CASE("kernel bodies: the transformer's CUDA bodies match the CPU backend") {
  using namespace kernels::cuda;
  const int64_t n = 2, t = 9, h = 2, dk = 4, dv = 3;
  for (const bool causal : {true, false})
  for (const float dropout : {0.0f, 0.4f}) {
    CAPTURE(causal, dropout);
    const AttentionParams p{h, 0.5f, causal, dropout, 9};
    const AttentionShape s{t, h, dk, dv, p.scale, causal, dropout, 9};
    const Tensor q = random_tensor({n, t, h, dk}, 14), k = random_tensor({n, t, h, dk}, 15),
                 v = random_tensor({n, t, h, dv}, 16), dout = random_tensor({n, t, h, dv}, 17);
    Tensor want_o({n, t, h, dv}), want_l({n, h, t}), got_o({n, t, h, dv}), got_l({n, h, t});
    kernels::attention_forward(q, k, v, p, want_o, want_l);
    run_on_host(AttentionForwardRowsBody{q.data(), k.data(), v.data(), s, got_o.data(), got_l.data()}, n * h * t);
    require_close(got_o, want_o, 1e-5, 1e-4);
    require_close(got_l, want_l, 1e-5, 1e-4);
    Tensor want_dq(q.shape()), want_dk(k.shape()), want_dv(v.shape()), dq(q.shape()), dk_(k.shape()), dv_(v.shape());
    kernels::attention_backward(q, k, v, want_o, want_l, dout, p, want_dq, want_dk, want_dv);
    std::vector<float> delta(static_cast<size_t>(n * h * t));
    run_on_host(AttentionDeltaBody{want_o.data(), dout.data(), s, delta.data()}, n * h * t);
    run_on_host(AttentionQueryGradBody{q.data(), k.data(), v.data(), want_l.data(), dout.data(), delta.data(), s,
                                       dq.data()},
                n * h * t);
    run_on_host(AttentionKeyValueGradBody{q.data(), k.data(), v.data(), want_l.data(), dout.data(), delta.data(), s,
                                          dk_.data(), dv_.data()},
                n * h * t);
    require_close(dq, want_dq, 1e-5, 1e-4);
    require_close(dk_, want_dk, 1e-5, 1e-4);
    require_close(dv_, want_dv, 1e-5, 1e-4);
  }

  const Tensor x = random_tensor({5, 6}, 18, -2, 2), gamma = random_tensor({6}, 19), beta = random_tensor({6}, 20),
               dy = random_tensor({5, 6}, 21);
  Tensor want_y({5, 6}), want_m({5}), want_r({5}), got_y({5, 6}), got_m({5}), got_r({5});
  kernels::layer_norm_forward(x, &gamma, &beta, 1e-5f, want_y, want_m, want_r);
  run_on_host(LayerNormRowsBody{x.data(), gamma.data(), beta.data(), 1e-5f, 6, got_y.data(), got_m.data(), got_r.data()},
              5);
  require_close(got_y, want_y);
  Tensor want_dx({5, 6}), want_dg({6}), want_db({6}), got_dx({5, 6});
  kernels::layer_norm_backward(x, dy, &gamma, want_m, want_r, want_dx, &want_dg, &want_db);
  run_on_host(LayerNormBackwardRowsBody{x.data(), dy.data(), gamma.data(), want_m.data(), want_r.data(), 6, got_dx.data()},
              5);
  require_close(got_dx, want_dx);
  const LayerNormGammaValue gamma_terms{dy.data(), x.data(), want_m.data(), want_r.data(), 6};
  for (int64_t c = 0; c < 6; ++c) {
    double sum = 0;
    for (int64_t r = 0; r < 5; ++r) sum += gamma_terms(r, c);
    CHECK(sum == Approx(want_dg.data()[c]).margin(1e-5));
  }

  Tensor ids({4});
  const float id_values[] = {1, 3, 1, 0};
  std::copy(id_values, id_values + 4, ids.data());
  const Tensor table = random_tensor({4, 6}, 22), dy_rows = random_tensor({4, 6}, 23);
  Tensor want_e({4, 6}), got_e({4, 6}), want_dt({4, 6}), got_dt({4, 6});
  kernels::embedding_forward(ids, table, want_e);
  run_on_host(EmbeddingGatherBody{ids.data(), table.data(), 6, got_e.data()}, 24);
  require_close(got_e, want_e);
  kernels::embedding_backward(ids, dy_rows, want_dt);
  run_on_host(EmbeddingScatterBody{ids.data(), dy_rows.data(), 4, 6, got_dt.data()}, 24);
  require_close(got_dt, want_dt);

  const Tensor gx = random_tensor({3, 7}, 24, -3, 3), gdy = random_tensor({3, 7}, 25);
  for (const Activation act : {Activation::kGelu, Activation::kGeluTanh}) {
    Tensor want_g({3, 7}), got_g({3, 7}), want_gd({3, 7}), got_gd({3, 7});
    kernels::activation_forward(act, gx, want_g);
    run_on_host(ActivationForwardBody<float>{gx.data(), got_g.data(), act}, 21);
    require_close(got_g, want_g);
    kernels::activation_backward_from_input(act, gx, gdy, want_gd);
    run_on_host(ActivationGradFromInputBody{gx.data(), gdy.data(), got_gd.data(), act}, 21);
    require_close(got_gd, want_gd);
  }
}

namespace {

// attention_steps.h's Ops on the host: vectors for scratch, the batched
// product as loops over column-major matrices (cuBLAS's conventions), the
// bodies through run_on_host.
class HostOps {
 public:
  float* scratch(int64_t floats) {
    buffers_.push_back(std::make_unique<std::vector<float>>(static_cast<size_t>(floats), NAN));
    return buffers_.back()->data();
  }
  void matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t batch, float alpha, const float* a,
              const float* b, float* c) {
    const int64_t a_rows = trans_a ? k : m, b_rows = trans_b ? n : k;
    for (int64_t x = 0; x < batch; ++x) {
      const float* ax = a + x * m * k;
      const float* bx = b + x * k * n;
      float* cx = c + x * m * n;
      for (int64_t col = 0; col < n; ++col)
        for (int64_t row = 0; row < m; ++row) {
          double sum = 0.0;
          for (int64_t e = 0; e < k; ++e) {
            const float av = trans_a ? ax[row * a_rows + e] : ax[e * a_rows + row];
            const float bv = trans_b ? bx[e * b_rows + col] : bx[col * b_rows + e];
            sum += static_cast<double>(av) * bv;
          }
          cx[col * m + row] = static_cast<float>(alpha * sum);
        }
    }
  }
  template <class Body>
  void run(const Body& body, int64_t n) {
    run_on_host(body, n);
  }

 private:
  std::vector<std::unique_ptr<std::vector<float>>> buffers_;
};

}  // namespace

TEST_CASE("the GPU's attention as batched products (attention_steps.h) matches the CPU backend, run on the host") {
  using namespace kernels::cuda;
  struct C {
    int64_t n, t, h, dk, dv;
    bool causal;
    float dropout;
  };
  for (const C& c : {C{2, 9, 2, 4, 3, true, 0.0f}, C{1, 70, 3, 8, 8, false, 0.0f}, C{2, 33, 2, 5, 7, true, 0.3f},
                     C{1, 17, 1, 6, 6, false, 0.5f}}) {
    CAPTURE(c.n, c.t, c.h, c.dk, c.dv, c.causal, c.dropout);
    const AttentionParams p{c.h, 1.0f / std::sqrt(static_cast<float>(c.dk)), c.causal, c.dropout, 21};
    const AttentionShape s{c.t, c.h, c.dk, c.dv, p.scale, c.causal, c.dropout, 21};
    const Tensor q = random_tensor({c.n, c.t, c.h, c.dk}, 31), k = random_tensor({c.n, c.t, c.h, c.dk}, 32),
                 v = random_tensor({c.n, c.t, c.h, c.dv}, 33), dout = random_tensor({c.n, c.t, c.h, c.dv}, 34);
    Tensor want_o(v.shape()), want_l({c.n, c.h, c.t}), got_o(v.shape()), got_l({c.n, c.h, c.t});
    kernels::attention_forward(q, k, v, p, want_o, want_l);
    HostOps forward;
    attention_forward_steps(forward, q.data(), k.data(), v.data(), c.n, s, got_o.data(), got_l.data());
    require_close(got_o, want_o, 1e-5, 1e-4);
    require_close(got_l, want_l, 1e-5, 1e-4);
    Tensor want_dq(q.shape()), want_dk(k.shape()), want_dv(v.shape()), dq(q.shape()), dk(k.shape()), dv(v.shape());
    kernels::attention_backward(q, k, v, want_o, want_l, dout, p, want_dq, want_dk, want_dv);
    HostOps backward;
    attention_backward_steps(backward, q.data(), k.data(), v.data(), want_o.data(), want_l.data(), dout.data(), c.n, s,
                             dq.data(), dk.data(), dv.data());
    require_close(dq, want_dq, 1e-5, 1e-4);
    require_close(dk, want_dk, 1e-5, 1e-4);
    require_close(dv, want_dv, 1e-5, 1e-4);
  }
}
