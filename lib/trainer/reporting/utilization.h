// Model FLOPs utilisation (MFU) of a language model's training: how much of the
// device's arithmetic the step turns into model progress.
//
//   FLOPs per token   PaLM's formula (Chowdhery et al. 2022, appendix B):
//                     6 * N + 12 * L * d * T, N every trainable parameter (the
//                     embeddings and the LM head included, as llm.c counts),
//                     L attention layers (TransformerDecoder blocks and
//                     top-level MultiHeadAttention), d their width, T the
//                     sequence. Recomputation and the masked half of causal
//                     attention do not count: it is the model's work, not the
//                     kernels'.
//   the peak          a GPU's dense datasheet peak for the precision's product
//                     dtype (bf16 / fp16 tensor cores, fp32 without TF32), from
//                     a table by device name; beside it, always, a GEMM this
//                     process measures on the device (one large matrix product
//                     in that dtype, the best of several). On the CPU there is
//                     no datasheet: the measured GEMM (oneDNN, the job's threads)
//                     is the peak.
//   MFU               achieved TFLOP/s (tokens/s x FLOPs per token) / the peak.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/job_file.h"
#include "nn/model_spec.h"
#include "tensor/device.h"

namespace dtrain::trainer {

struct ModelFlops {
  int64_t params = 0;    // N: trainable parameters
  int64_t layers = 0;    // L: attention layers
  int64_t width = 0;     // d
  int64_t sequence = 0;  // T
  double per_token = 0.0;
};

// The FLOPs per token of a model with attention layers; nullopt for one without
// (an MLP, a CNN: no MFU is reported for those).
std::optional<ModelFlops> model_flops(const nn::ModelSpec& spec);

struct PeakFlops {
  std::string dtype;              // the products' dtype: "float32", "bfloat16", "float16"
  double datasheet_tflops = 0.0;  // 0: no table entry (the CPU, an unknown GPU)
  std::string datasheet;          // "NVIDIA H100 SXM, bfloat16 dense" (the table's row)
  double measured_tflops = 0.0;   // 0: not measured (the backend has no product in that dtype)
  std::string measured;           // "oneDNN 2048x2048x2048 float32 GEMM, 2 threads"
  // What MFU is taken against: the datasheet where there is one, else the measured GEMM.
  double tflops() const { return datasheet_tflops > 0 ? datasheet_tflops : measured_tflops; }
  std::string source() const;  // "datasheet: ..." or "measured: ..."
};

// The products' dtype of `precision` (mixed_bfloat16: bfloat16, ...).
std::string product_dtype_name(config::Precision precision);
// The dense datasheet peak of the GPU named `gpu_name` in `dtype` (0 / "" when
// the table has no row for it). Pure: tested on the host.
PeakFlops datasheet_peak(const std::string& gpu_name, const std::string& dtype);
// Times one square GEMM of `size` in `dtype` on `device`, best of `repeats`:
// TFLOP/s, or 0 when the backend refuses the product in that dtype.
double measure_gemm_tflops(const Device& device, const std::string& dtype, int64_t size, int repeats);
// datasheet_peak for the device (a GPU's name; none for the CPU) and a measured
// GEMM beside it: 8192 on a GPU; on the CPU 2048 (`thorough`, bench train) or
// 1024 (a run's summary: a few milliseconds).
PeakFlops device_peak(const Device& device, config::Precision precision, int threads, bool thorough);

struct Utilization {
  ModelFlops model;
  int devices = 1;               // the job's training devices (tasks x replicas each)
  double tokens_per_sec = 0.0;   // the job's
  double achieved_tflops = 0.0;  // the job's: tokens_per_sec x model.per_token
  PeakFlops peak;                // one device's
  double mfu = 0.0;              // achieved / (devices x peak.tflops()) (0 without a peak)
  double mfu_of_measured = 0.0;  // achieved / (devices x the measured GEMM) (0 when not measured)
  int64_t peak_memory_bytes = 0;  // a GPU's pool (bytes it held at most), the CPU's peak resident set
  std::string peak_memory_kind;   // "device pool" or "process resident"
};

Utilization utilization(const ModelFlops& model, double tokens_per_sec, int devices, const PeakFlops& peak);
// "123.4 TFLOP/s, MFU 41.2% of 989.4 (datasheet: ...); 60.1% of the measured GEMM"
std::string utilization_text(const Utilization& u);
// The figures as one JSON object (the run summary's "utilization", bench
// train --json's fields): tokens_per_sec, model_flops_per_token (and its N, L,
// d, T and formula), achieved_tflops, peak_tflops and its source, the measured
// GEMM, mfu, mfu_of_measured_gemm, peak memory.
std::string utilization_json(const Utilization& u);
// The device's memory high-water mark (see Utilization::peak_memory_bytes).
void read_peak_memory(const Device& device, Utilization& u);

}  // namespace dtrain::trainer
