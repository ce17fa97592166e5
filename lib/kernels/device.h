// The compute devices of this process, beside the ops: which GPUs are usable,
// choosing the device a job trains on, the backends' versions, waiting for a
// device, and TF32 math. ops.h holds the ops themselves; this header compiles
// without CUDA, and a build without the CUDA backend reports why it has no GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/device.h"

namespace dtrain::kernels {

struct GpuInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  size_t total_bytes = 0, free_bytes = 0;  // free_bytes: 0 unless asked for
  std::string pci_bus_id;  // "0000:3b:00.0": the same GPU whatever CUDA_VISIBLE_DEVICES numbers it
};
struct GpuReport {
  bool built_with_cuda = false;
  std::vector<GpuInfo> gpus;  // usable GPUs
  std::string why_none;       // when gpus is empty: why (no CUDA backend, no driver, no device)
};
// What GPUs this process can use; safe to call without a GPU or driver.
// free_memory: also each GPU's free memory (creates a context on every GPU, so
// only `dtrain devices` asks for it).
GpuReport list_gpus(bool free_memory = false);
// Resolves a job's "device" value ("auto": the GPU when one is usable, else the
// CPU; "cpu"; "gpu"/"cuda" = cuda:0; "cuda:N") and makes that device ready for
// tensors and ops. Asking for a GPU that is not usable is a ConfigError saying why.
Device select_device(const std::string& spec);
// The device `spec` names on a machine with `gpu_count` usable GPUs (`why_none`:
// why there are none), without touching it: select_device's choice and its
// ConfigErrors, as a pure function (the execution plan decides with it).
Device resolve_device(const std::string& spec, int gpu_count, const std::string& why_none);
// The backends of this build and their libraries' versions, e.g.
// "cpu (oneDNN 2.6.3), cuda (CUDA runtime 13.0, cuBLASLt 13.1.0, cuDNN 9.19.0)".
std::string backends_description();
// The instruction set oneDNN runs on (e.g. "avx512_core_bf16", or "avx2" on an
// AVX2 CPU or with ONEDNN_MAX_CPU_ISA=AVX2) and whether it computes bfloat16
// natively.
std::string cpu_isa();
bool cpu_has_bf16();
// How mixed_bfloat16 computes on this CPU:
//   kNative     oneDNN's bfloat16 kernels on bfloat16 instructions (avx512_bf16, AMX)
//   kConverted  oneDNN's bfloat16 kernels converting to float32 inside (avx512_core)
//   kEmulated   no oneDNN bfloat16 kernels for the ISA (AVX2): each op runs in
//               float32 between dtrain's bfloat16 roundings (kernels/cpu/onednn.h)
enum class CpuBf16 { kNative, kConverted, kEmulated };
CpuBf16 cpu_bf16();
// "native", "converted" or "emulated".
std::string cpu_bf16_name(CpuBf16 path);
// One line on it, with the reason: "no native support on this CPU (ISA avx2);
// emulated, expect it slower than float32".
std::string cpu_bf16_description();
// How many CPU op plans (one per op, shape and dtypes) this process has made on
// the emulated path so far: 0 where oneDNN had a bfloat16 kernel for each.
int64_t cpu_bf16_emulated_ops();
// Makes `device` the calling thread's GPU (a process may use several: mirrored
// runs one replica per GPU, a thread each); ops switch to their tensors' GPU by
// themselves, this makes the choice explicit. No-op on the CPU.
void use_device(const Device& device);
// Waits until every op issued on `device` has finished (no-op on the CPU).
void synchronize(const Device& device);
// The stream every op on `device` is issued on (a cudaStream_t, for a
// communicator that orders its collectives after the ops: NCCL); nullptr on the CPU.
void* compute_stream(const Device& device);

// The bytes of device memory dtrain's caching allocator holds on `device`
// (in use by tensors and scratch buffers, or cached for reuse); it only grows
// until an allocation runs out of memory. 0 on the CPU.
size_t device_memory_reserved(const Device& device);

// Which kernels attention runs on a GPU: kMatmul, cuBLASLt's strided batched
// products over the (N*H, T, T) scores with own kernels between them (fast; the
// backward keeps two score matrices); kRows, a row of own kernel per query
// (flash-style, no (T, T) matrix, slow); kAuto (the default) kMatmul while the
// backward's two score matrices take at most kGpuAttentionScoresLimit bytes,
// else kRows. No effect on the CPU (blocked, always).
enum class GpuAttention { kAuto, kMatmul, kRows };
constexpr size_t kGpuAttentionScoresLimit = size_t{1} << 30;
void set_gpu_attention(GpuAttention kernels);
GpuAttention gpu_attention();
// "auto", "matmul" or "rows"; parse_gpu_attention throws a ConfigError on another name.
std::string gpu_attention_name(GpuAttention kernels);
GpuAttention parse_gpu_attention(const std::string& name);

// Sets the number of CPU compute threads (OpenMP) of the calling thread's team,
// with flush-to-zero; num_threads() reads it.
void set_num_threads(int threads);
int num_threads();
// TF32 tensor-core math for float32 convolutions on GPUs that have it (PyTorch's
// default: on for convolutions, off for matmuls). No effect on the CPU.
void set_allow_tf32(bool allow);

}  // namespace dtrain::kernels
