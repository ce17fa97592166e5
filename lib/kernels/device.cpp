// Implementation of device.h: GPU listing, device selection, the backends'
// versions, waiting for a device, TF32 and the GPU attention kernels' choice,
// forwarded to cuda:: in builds with the CUDA backend (DTRAIN_HAVE_CUDA) and
// answered here for the CPU otherwise.
#include "kernels/device.h"

#include <atomic>

#include "core/error.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#if DTRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace dtrain::kernels {

GpuReport list_gpus(bool free_memory) {
#if DTRAIN_HAVE_CUDA
  return cuda::list_gpus(free_memory);
#else
  (void)free_memory;
  GpuReport report;
  report.why_none = "this dtrain was built without the CUDA backend (DTRAIN_CUDA=OFF, or no CUDA toolkit found)";
  return report;
#endif
}

Device resolve_device(const std::string& spec, int gpu_count, const std::string& why_none) {
  if (spec == "auto") return gpu_count > 0 ? Device::cuda(0) : Device::cpu();
  const Device device = Device::parse(spec);
  if (device.is_cpu()) return Device::cpu();
  if (gpu_count == 0)
    throw ConfigError(str("device: \"", spec, "\" asks for a GPU, but none is usable: ", why_none,
                          "; set \"device\": \"cpu\" (or \"auto\") to train on the CPU"));
  if (device.index >= gpu_count)
    throw ConfigError(str("device: \"", spec, "\" asks for GPU ", device.index, ", but this machine has ", gpu_count,
                          " (cuda:0 to cuda:", gpu_count - 1, ")"));
  return device;
}

Device select_device(const std::string& spec) {
  if (spec != "auto" && Device::parse(spec).is_cpu()) return Device::cpu();  // no GPU listing needed
  const GpuReport report = list_gpus();
  const Device device = resolve_device(spec, static_cast<int>(report.gpus.size()), report.why_none);
#if DTRAIN_HAVE_CUDA
  if (!device.is_cpu()) cuda::activate(device.index);
#endif
  return device;
}

std::string backends_description() {
  std::string out = "cpu (" + cpu::library_version() + ", ISA " + cpu::isa_name() + ")";
#if DTRAIN_HAVE_CUDA
  out += ", cuda (" + cuda::library_versions() + ")";
#else
  out += ", cuda: not built";
#endif
  return out;
}

std::string cpu_isa() { return cpu::isa_name(); }
bool cpu_has_bf16() { return cpu::has_bf16_instructions(); }

CpuBf16 cpu_bf16() {
  if (!cpu::has_bf16_kernels()) return CpuBf16::kEmulated;
  return cpu::has_bf16_instructions() ? CpuBf16::kNative : CpuBf16::kConverted;
}

int64_t cpu_bf16_emulated_ops() { return cpu::bf16_emulated_plans(); }

std::string cpu_bf16_name(CpuBf16 path) {
  switch (path) {
    case CpuBf16::kNative: return "native";
    case CpuBf16::kConverted: return "converted";
    case CpuBf16::kEmulated: return "emulated";
  }
  return "unknown";
}

std::string cpu_bf16_description() {
  const std::string isa = cpu::isa_name();
  switch (cpu_bf16()) {
    case CpuBf16::kNative: return "native (ISA " + isa + ")";
    case CpuBf16::kConverted:
      return "no bfloat16 instructions on this CPU (ISA " + isa +
             "); oneDNN's bfloat16 kernels convert, expect it slower than float32";
    case CpuBf16::kEmulated:
      return "no native support on this CPU (ISA " + isa + "); emulated, expect it slower than float32";
  }
  return "unknown";
}

void set_num_threads(int threads) { cpu::set_num_threads(threads); }
int num_threads() { return cpu::num_threads(); }

void synchronize(const Device& device) {
  if (device.is_cpu()) return;
#if DTRAIN_HAVE_CUDA
  cuda::synchronize(device.index);
#endif
}

void* compute_stream(const Device& device) {
  if (device.is_cpu()) return nullptr;
#if DTRAIN_HAVE_CUDA
  return cuda::compute_stream(device.index);
#else
  return nullptr;
#endif
}

namespace {
std::atomic<int> gpu_attention_choice{static_cast<int>(GpuAttention::kAuto)};
}  // namespace

void set_gpu_attention(GpuAttention kernels) { gpu_attention_choice = static_cast<int>(kernels); }
GpuAttention gpu_attention() { return static_cast<GpuAttention>(gpu_attention_choice.load()); }

std::string gpu_attention_name(GpuAttention kernels) {
  switch (kernels) {
    case GpuAttention::kAuto: return "auto";
    case GpuAttention::kMatmul: return "matmul";
    case GpuAttention::kRows: return "rows";
  }
  return "auto";
}

GpuAttention parse_gpu_attention(const std::string& name) {
  for (const GpuAttention k : {GpuAttention::kAuto, GpuAttention::kMatmul, GpuAttention::kRows})
    if (gpu_attention_name(k) == name) return k;
  throw ConfigError(str("GPU attention kernels \"", name, "\": expected auto, matmul or rows"));
}

size_t device_memory_reserved(const Device& device) {
  if (device.is_cpu()) return 0;
#if DTRAIN_HAVE_CUDA
  return cuda::reserved_bytes(device.index);
#else
  return 0;
#endif
}

void use_device(const Device& device) {
  if (device.is_cpu()) return;
#if DTRAIN_HAVE_CUDA
  cuda::use_device(device.index);
#endif
}

void set_allow_tf32(bool allow) {
#if DTRAIN_HAVE_CUDA
  cuda::set_allow_tf32(allow);
#else
  (void)allow;
#endif
}

}  // namespace dtrain::kernels
