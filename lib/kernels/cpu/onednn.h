// Shared oneDNN plumbing for the CPU backend: the engine, a stream per thread, a
// primitive cache keyed by shape, and helpers to wrap Tensors as dnnl::memory.
//
// Creating a oneDNN primitive costs far more than running it, so every op builds
// its primitive once per distinct shape/attribute key and reuses it.
//
// bfloat16 without bfloat16 kernels: oneDNN 2.6 has bf16 matmul, convolution,
// eltwise and pooling primitives only from avx512_core on; on an AVX2 CPU (or with
// the ISA capped by ONEDNN_MAX_CPU_ISA) creating one fails. Each op then builds the
// same primitive over float32 (decided once, when its plan is made: see
// make_plan) and runs it through Staging: bfloat16 inputs widened to float32
// (exact), the primitive in float32 (what avx512_bf16 and AMX do inside), float32
// outputs rounded to bfloat16 (nearest even) exactly where a native primitive
// rounds its result. Reorders (casts) have bf16 kernels on every ISA.
#pragma once

#include <dnnl.hpp>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

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

// The data type a plan's primitive computes a tensor in: its own, or float32 for
// a bfloat16 tensor when the plan is emulated (see the top of this file).
memory::data_type compute_type(const Tensor& t, bool emulated);
// Whether any of the tensors is bfloat16 (only such a primitive may be emulated).
bool any_bf16(std::initializer_list<const Tensor*> tensors);

// What an op's primitive is, for an error: "Dense matmul (64x784)x(784x128) bf16,bf16
// -> bf16". Built only when creation fails.
using Describe = std::function<std::string()>;

// Builds a plan with make(emulated): first natively (emulated = false); where
// oneDNN has no kernel for it on this ISA and bf16 tensors are involved, again
// with emulated = true (float32 primitives, Staging at run time), logging the
// first time this process emulates. Any other creation failure is a ConfigError
// naming the op, its shapes and data types, and the ISA. Plan must have a
// `bool emulated` member.
template <class Plan>
Plan make_plan(bool has_bf16, const Describe& describe, const std::function<Plan(bool)>& make);
[[noreturn]] void throw_creation_error(const Describe& describe, const dnnl::error& e, bool emulated);
void note_bf16_emulated(const Describe& describe);

template <class Plan>
Plan make_plan(bool has_bf16, const Describe& describe, const std::function<Plan(bool)>& make) {
  try {
    Plan plan = make(false);
    plan.emulated = false;
    return plan;
  } catch (const dnnl::error& e) {
    if (!has_bf16 || e.status != dnnl_unimplemented) throw_creation_error(describe, e, false);
  }
  try {
    Plan plan = make(true);
    plan.emulated = true;
    note_bf16_emulated(describe);
    return plan;
  } catch (const dnnl::error& e) {
    throw_creation_error(describe, e, true);
  }
}

// The memories one execution hands its primitive. For a native plan they are the
// tensors themselves. For an emulated plan a bfloat16 tensor is staged in a
// float32 buffer of this thread: an input is widened into it first, an output is
// written there and rounded into the tensor by finish().
class Staging {
 public:
  explicit Staging(bool emulated) : emulated_(emulated) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // md: the plan's desc for t (float32 where t is bf16 and the plan is emulated).
  memory in(const memory::desc& md, const Tensor& t);
  memory out(const memory::desc& md, Tensor& t);
  // Rounds the staged outputs into their bfloat16 tensors.
  void finish();

 private:
  memory staged(const memory::desc& md);
  bool emulated_;
  int slots_ = 0;
  std::vector<std::pair<memory, Tensor*>> outputs_;
};

// Executes a plan's primitive, then rounds its staged outputs.
void execute(const dnnl::primitive& p, const std::unordered_map<int, memory>& args, Staging& staging);

// float32 <-> bfloat16 over n contiguous elements, on oneDNN's reorder (cached per
// size and direction).
void convert(const void* from, DType from_type, void* to, DType to_type, int64_t n);

}  // namespace dtrain::kernels::cpu
