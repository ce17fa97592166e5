// `dtrain bench attention`: causal scaled dot-product attention alone, forward
// and backward (kernels::attention_*, blocked on the CPU), on random float32
// tensors of (batch, seq, heads, head_dim), on the CPU or a GPU (--device): the
// mean time of a forward plus backward and the peak memory the op adds (on the
// CPU ru_maxrss after the first call, less before it; on a GPU the device memory
// dtrain's caching allocator took for it; the inputs, outputs and gradients are
// allocated before).
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

// MiB of memory taken so far: the process's peak resident set on the CPU, the
// caching allocator's device memory on a GPU.
double memory_mib(const Device& device) {
  if (device.is_cpu()) return max_rss_mib();
  return static_cast<double>(kernels::device_memory_reserved(device)) / (1024.0 * 1024.0);
}

}  // namespace

int bench_attention_command(const BenchAttentionOptions& o) {
  kernels::set_num_threads(o.threads);
  const Device device = kernels::select_device(o.device);
  kernels::set_gpu_attention(kernels::parse_gpu_attention(o.gpu_kernels));
  Rng rng(1);
  const Shape qk{o.batch, o.seq, o.heads, o.head_dim};
  const Tensor q = random(qk, rng).to(device), k = random(qk, rng).to(device), v = random(qk, rng).to(device),
               dout = random(qk, rng).to(device);
  Tensor out(qk, device), lse({o.batch, o.heads, o.seq}, device), dq(qk, device), dk(qk, device), dv(qk, device);
  const kernels::AttentionParams p{o.heads, 1.0f / std::sqrt(static_cast<float>(o.head_dim)), true};
  auto once = [&] {
    kernels::attention_forward(q, k, v, p, out, lse);
    kernels::attention_backward(q, k, v, out, lse, dout, p, dq, dk, dv);
  };
  kernels::synchronize(device);
  const double before = memory_mib(device);
  once();
  kernels::synchronize(device);
  const double peak_extra = memory_mib(device) - before;
  for (int i = 0; i < o.warmup; ++i) once();
  kernels::synchronize(device);
  Stopwatch clock;
  for (int i = 0; i < o.steps; ++i) once();
  kernels::synchronize(device);
  const double ms = clock.seconds() * 1e3 / o.steps;
  if (o.json) {
    std::printf("%s\n", nlohmann::json{{"framework", "dtrain"}, {"op", "attention causal fwd+bwd"},
                                       {"device", device.str()}, {"gpu_kernels", o.gpu_kernels}, {"batch", o.batch},
                                       {"heads", o.heads}, {"seq", o.seq}, {"head_dim", o.head_dim},
                                       {"threads", o.threads}, {"ms", ms}, {"peak_extra_mib", peak_extra}}
                            .dump()
                            .c_str());
  } else {
    std::printf("attention (causal, forward + backward) on %s, batch %lld, %lld heads of %lld, sequence %lld, "
                "%d threads: %.3f ms, peak memory added %.1f MiB\n",
                device.str().c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.heads), static_cast<long long>(o.head_dim),
                static_cast<long long>(o.seq), o.threads, ms, peak_extra);
  }
  return 0;
}

}  // namespace dtrain::app
