// Implementation of utilization.h.
#include "trainer/reporting/utilization.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/process_memory.h"
#include "core/strings.h"
#include "core/timer.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "nn/sequential.h"
#include "tensor/tensor.h"

namespace dtrain::trainer {

std::optional<ModelFlops> model_flops(const nn::ModelSpec& spec) {
  ModelFlops f;
  for (const nn::LayerInfo& layer : nn::describe_layers(spec)) {
    f.params += layer.trainable_params;
    if (layer.kind != nn::LayerKind::kTransformerDecoder && layer.kind != nn::LayerKind::kMultiHeadAttention) continue;
    const Shape& in = layer.input_shape;
    if (in.size() < 2) continue;
    ++f.layers;
    f.sequence = in[in.size() - 2];
    f.width = in.back();
  }
  if (f.layers == 0) return std::nullopt;
  f.per_token = 6.0 * static_cast<double>(f.params) +
                12.0 * static_cast<double>(f.layers) * static_cast<double>(f.width) * static_cast<double>(f.sequence);
  return f;
}

std::string PeakFlops::source() const {
  if (datasheet_tflops > 0) return str("datasheet: ", datasheet);
  if (measured_tflops > 0) return str("measured: ", measured);
  return "none";
}

std::string product_dtype_name(config::Precision precision) {
  switch (precision) {
    case config::Precision::kMixedBfloat16: return "bfloat16";
    case config::Precision::kMixedFloat16: return "float16";
    default: return "float32";
  }
}

namespace {

// Dense (no sparsity) TFLOP/s from NVIDIA's datasheets: tensor-core bf16/fp16,
// and plain fp32 (dtrain's float32 GEMMs run without TF32).
struct DatasheetRow {
  const char* match;    // all of these words in the device's name (space-separated)
  const char* exclude;  // none of these ("" = none)
  const char* label;
  double bf16, fp32;
};
constexpr DatasheetRow kDatasheet[] = {
    {"H100 PCIe", "", "NVIDIA H100 PCIe", 756.0, 51.2},
    {"H100 NVL", "", "NVIDIA H100 NVL", 835.0, 60.0},
    {"H100", "PCIe NVL", "NVIDIA H100 SXM", 989.4, 66.9},
    {"H200", "", "NVIDIA H200", 989.4, 66.9},
    {"GH200", "", "NVIDIA GH200", 989.4, 66.9},
    {"A100", "", "NVIDIA A100", 312.0, 19.5},
    {"L40S", "", "NVIDIA L40S", 362.1, 91.6},
    {"L4", "L40", "NVIDIA L4", 121.0, 30.3},
    {"A10", "A100", "NVIDIA A10", 125.0, 31.2},
};

bool has_word(const std::string& name, const std::string& word) {
  for (size_t at = name.find(word); at != std::string::npos; at = name.find(word, at + 1)) {
    const bool starts = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
    const size_t end = at + word.size();
    const bool ends = end == name.size() || !std::isalnum(static_cast<unsigned char>(name[end]));
    if (starts && ends) return true;
  }
  return false;
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

PeakFlops datasheet_peak(const std::string& gpu_name, const std::string& dtype) {
  PeakFlops p;
  p.dtype = dtype;
  for (const DatasheetRow& row : kDatasheet) {
    const auto all = words(row.match), none = words(row.exclude);
    if (!std::all_of(all.begin(), all.end(), [&](const std::string& w) { return has_word(gpu_name, w); })) continue;
    if (std::any_of(none.begin(), none.end(), [&](const std::string& w) { return has_word(gpu_name, w); })) continue;
    p.datasheet_tflops = dtype == "float32" ? row.fp32 : row.bf16;
    p.datasheet = str(row.label, ", ", dtype, " dense");
    return p;
  }
  return p;
}

double measure_gemm_tflops(const Device& device, const std::string& dtype, int64_t size, int repeats) {
  const DType type = dtype == "bfloat16" ? DType::kBF16 : dtype == "float16" ? DType::kF16 : DType::kF32;
  try {
    Tensor x({size, size}, device, type), w({size, size}, device, type);
    Tensor y({size, size}, device, DType::kF32);  // float32 accumulation and output
    x.fill(0.5f);
    w.fill(0.25f);
    kernels::dense_forward(x, w, nullptr, kernels::Activation::kLinear, y);  // (plans, caches)
    kernels::synchronize(device);
    double best = 1e30;
    for (int i = 0; i < repeats; ++i) {
      Stopwatch t;
      kernels::dense_forward(x, w, nullptr, kernels::Activation::kLinear, y);
      kernels::synchronize(device);
      best = std::min(best, t.seconds());
    }
    const double n = static_cast<double>(size);
    return 2.0 * n * n * n / std::max(best, 1e-12) / 1e12;
  } catch (const Error&) {
    return 0.0;  // (no product in this dtype on this backend: no measured peak)
  }
}

PeakFlops device_peak(const Device& device, config::Precision precision, int threads, bool thorough) {
  const std::string dtype = product_dtype_name(precision);
  PeakFlops p;
  p.dtype = dtype;
  if (!device.is_cpu()) {
    for (const kernels::GpuInfo& gpu : kernels::list_gpus().gpus)
      if (gpu.index == device.index) p = datasheet_peak(gpu.name, dtype);
  }
  const int64_t size = !device.is_cpu() ? 8192 : thorough ? 2048 : 1024;
  p.measured_tflops = measure_gemm_tflops(device, dtype, size, device.is_cpu() ? 3 : 10);
  if (p.measured_tflops > 0)
    p.measured = str(device.is_cpu() ? "oneDNN " : "cuBLAS ", size, "x", size, "x", size, " ", dtype, " GEMM",
                     device.is_cpu() ? str(", ", threads, " thread", threads == 1 ? "" : "s") : std::string());
  return p;
}

Utilization utilization(const ModelFlops& model, double tokens_per_sec, int devices, const PeakFlops& peak) {
  Utilization u;
  u.model = model;
  u.devices = std::max(1, devices);
  u.tokens_per_sec = tokens_per_sec;
  u.achieved_tflops = tokens_per_sec * model.per_token / 1e12;
  u.peak = peak;
  const double n = static_cast<double>(u.devices);
  u.mfu = peak.tflops() > 0 ? u.achieved_tflops / (n * peak.tflops()) : 0.0;
  u.mfu_of_measured = peak.measured_tflops > 0 ? u.achieved_tflops / (n * peak.measured_tflops) : 0.0;
  return u;
}

std::string utilization_text(const Utilization& u) {
  std::string text = str(format_fixed(u.achieved_tflops, u.achieved_tflops < 1 ? 3 : 1), " TFLOP/s (",
                         format_fixed(u.model.per_token / 1e9, 3), " GFLOP a token: 6N + 12LdT, N = ", u.model.params,
                         ", L = ", u.model.layers, ", d = ", u.model.width, ", T = ", u.model.sequence, ")");
  if (u.peak.tflops() <= 0) return text;
  text += str(", MFU ", format_fixed(100.0 * u.mfu, 1), "% of ", u.devices > 1 ? str(u.devices, " x ") : std::string(),
              format_fixed(u.peak.tflops(), u.peak.tflops() < 1 ? 3 : 1), " TFLOP/s (", u.peak.source(), ")");
  if (u.peak.datasheet_tflops > 0 && u.peak.measured_tflops > 0)
    text += str("; ", format_fixed(100.0 * u.mfu_of_measured, 1), "% of the measured GEMM's ",
                format_fixed(u.peak.measured_tflops, 1));
  return text;
}

std::string utilization_json(const Utilization& u) {
  nlohmann::json j = {
      {"tokens_per_sec", u.tokens_per_sec},
      {"model_flops_per_token", u.model.per_token},
      {"model_flops_formula", "6N + 12LdT (PaLM): N trainable parameters, L attention layers, d width, T sequence"},
      {"params", u.model.params},
      {"layers", u.model.layers},
      {"width", u.model.width},
      {"sequence", u.model.sequence},
      {"devices", u.devices},
      {"achieved_tflops", u.achieved_tflops},
      {"product_dtype", u.peak.dtype},
      {"peak_tflops", u.peak.tflops()},
      {"peak_source", u.peak.source()},
      {"datasheet_tflops", u.peak.datasheet_tflops},
      {"measured_gemm_tflops", u.peak.measured_tflops},
      {"measured_gemm", u.peak.measured},
      {"mfu", u.mfu},
      {"mfu_of_measured_gemm", u.mfu_of_measured},
      {"peak_memory_bytes", u.peak_memory_bytes},
      {"peak_memory_kind", u.peak_memory_kind}};
  return j.dump();
}

void read_peak_memory(const Device& device, Utilization& u) {
  if (device.is_cpu()) {
    u.peak_memory_bytes = peak_resident_bytes();
    u.peak_memory_kind = "process resident";
  } else {
    u.peak_memory_bytes = static_cast<int64_t>(kernels::device_memory_reserved(device));
    u.peak_memory_kind = "device pool";
  }
}

}  // namespace dtrain::trainer
