// `dtrain bench attention`: causal scaled dot-product attention alone, forward
// and backward (kernels::attention_*, blocked on the CPU), on random float32
// tensors of (batch, seq, heads, head_dim): the mean time of a forward plus
// backward and the peak memory the op adds (ru_maxrss after the first call,
// less before it; the inputs, outputs and gradients are allocated before).
// bench/torch_gpt_reference.py's `attention` measures PyTorch's
// scaled_dot_product_attention the same way.
#include <sys/resource.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/rng.h"
#include "core/timer.h"
#include "kernels/device.h"
#include "kernels/ops.h"

namespace dtrain::app {
namespace {

double max_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

Tensor random(const Shape& shape, Rng& rng) {
  Tensor t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(rng.normal());
  return t;
}

}  // namespace

int bench_attention_command(const BenchAttentionOptions& o) {
  kernels::set_num_threads(o.threads);
  Rng rng(1);
  const Shape qk{o.batch, o.seq, o.heads, o.head_dim};
  const Tensor q = random(qk, rng), k = random(qk, rng), v = random(qk, rng), dout = random(qk, rng);
  Tensor out(qk), lse({o.batch, o.heads, o.seq}), dq(qk), dk(qk), dv(qk);
  const kernels::AttentionParams p{o.heads, 1.0f / std::sqrt(static_cast<float>(o.head_dim)), true};
  auto once = [&] {
    kernels::attention_forward(q, k, v, p, out, lse);
    kernels::attention_backward(q, k, v, out, lse, dout, p, dq, dk, dv);
  };
  const double before = max_rss_mib();
  once();
  const double peak_extra = max_rss_mib() - before;
  for (int i = 0; i < o.warmup; ++i) once();
  Stopwatch clock;
  for (int i = 0; i < o.steps; ++i) once();
  const double ms = clock.seconds() * 1e3 / o.steps;
  if (o.json) {
    std::printf("%s\n", nlohmann::json{{"framework", "dtrain"}, {"op", "attention causal fwd+bwd"}, {"batch", o.batch},
                                       {"heads", o.heads}, {"seq", o.seq}, {"head_dim", o.head_dim},
                                       {"threads", o.threads}, {"ms", ms}, {"peak_extra_mib", peak_extra}}
                            .dump()
                            .c_str());
  } else {
    std::printf("attention (causal, forward + backward), batch %lld, %lld heads of %lld, sequence %lld, %d threads: "
                "%.3f ms, peak memory added %.1f MiB\n",
                static_cast<long long>(o.batch), static_cast<long long>(o.heads), static_cast<long long>(o.head_dim),
                static_cast<long long>(o.seq), o.threads, ms, peak_extra);
  }
  return 0;
}

}  // namespace dtrain::app
