// Shared oneDNN plumbing for the CPU backend: the engine, a stream per thread, a
// primitive cache keyed by shape, and helpers to wrap Tensors as dnnl::memory.
//
// Creating a oneDNN primitive costs far more than running it, so every op builds
// its primitive once per distinct shape/attribute key and reuses it.
#pragma once

#include <dnnl.hpp>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "kernels/ops.h"

namespace dtrain::kernels::cpu {

using dnnl::memory;
using Tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;
constexpr auto kBF16 = dnnl::memory::data_type::bf16;

// oneDNN's data type for a tensor's dtype (f32, bf16, f16).
memory::data_type dnnl_type(DType dtype);
inline memory::data_type dnnl_type(const Tensor& t) { return dnnl_type(t.dtype()); }
// The dtypes of some tensors as a cache-key fragment, e.g. "f32,bf16".
std::string dtype_key(std::initializer_list<const Tensor*> tensors);

dnnl::engine& engine();
// The calling thread's stream (oneDNN CPU streams execute synchronously with OpenMP).
dnnl::stream& stream();

// A dnnl::memory over a tensor's buffer (no copy).
inline memory as_memory(const memory::desc& md, const Tensor& t) {
  return memory(md, engine(), const_cast<void*>(t.raw()));
}

// The oneDNN algorithm for an activation fused as a post-op or run alone, and the
// variant whose backward pass reads the forward output (dst).
dnnl::algorithm eltwise_algorithm(Activation act);
dnnl::algorithm eltwise_algorithm_dst(Activation act);

// Returns the calling thread's cached object of type T for `key`, building it with
// make() the first time. Each thread has its own cache, so replicas running on
// threads of one process never execute the same primitive object at once (a
// oneDNN primitive's scratchpad is not safe for concurrent execution).
template <class T>
T& cached(const std::string& key, const std::function<T()>& make) {
  thread_local std::unordered_map<std::string, std::unique_ptr<T>> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, std::make_unique<T>(make())).first;
  return *it->second;
}

// Executes a primitive on this thread's stream and waits for it.
void execute(const dnnl::primitive& p, const std::unordered_map<int, memory>& args);

}  // namespace dtrain::kernels::cpu
