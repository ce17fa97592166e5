// utilization.h: PaLM's FLOPs per token from a model's layers, the datasheet
// table by GPU name, the measured GEMM on the CPU, and the MFU arithmetic.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "job/job_config.h"
#include "trainer/reporting/utilization.h"

using namespace dtrain;
using namespace dtrain::trainer;

namespace {

job::JobConfig shipped(const std::string& name) {
  return job::load_job_config(std::string(DTRAIN_SOURCE_DIR) + "/configs/" + name);
}

}  // namespace

TEST_CASE("GPT-2 small's FLOPs per token are 6N + 12LdT with N its 163,159,680 parameters") {
  const std::optional<ModelFlops> f = model_flops(shipped("gpt2_small.json").model);
  REQUIRE(f.has_value());
  CHECK(f->params == 163159680);  // untied: the token table and the head each 768 x 50304 (+ the head's bias)
  CHECK(f->layers == 12);
  CHECK(f->width == 768);
  CHECK(f->sequence == 1024);
  CHECK(f->per_token == 6.0 * 163159680 + 12.0 * 12 * 768 * 1024);
}

TEST_CASE("a model without attention layers has no model FLOPs (no MFU is reported for it)") {
  CHECK_FALSE(model_flops(shipped("fashion_mnist_mlp.json").model).has_value());
  CHECK_FALSE(model_flops(shipped("fashion_mnist_cnn.json").model).has_value());
}

TEST_CASE("the datasheet table finds a GPU by the words of its name, in the products' dtype") {
  CHECK(datasheet_peak("NVIDIA H100 80GB HBM3", "bfloat16").datasheet_tflops == 989.4);
  CHECK(datasheet_peak("NVIDIA H100 80GB HBM3", "float32").datasheet_tflops == 66.9);
  CHECK(datasheet_peak("NVIDIA H100 80GB HBM3", "bfloat16").datasheet == "NVIDIA H100 SXM, bfloat16 dense");
  CHECK(datasheet_peak("NVIDIA H100 PCIe", "bfloat16").datasheet_tflops == 756.0);
  CHECK(datasheet_peak("NVIDIA H100 NVL", "float16").datasheet_tflops == 835.0);
  CHECK(datasheet_peak("NVIDIA H200", "bfloat16").datasheet_tflops == 989.4);
  CHECK(datasheet_peak("NVIDIA A100-SXM4-80GB", "bfloat16").datasheet_tflops == 312.0);
  CHECK(datasheet_peak("NVIDIA A10", "float32").datasheet_tflops == 31.2);  // not the A100's
  CHECK(datasheet_peak("NVIDIA L40S", "bfloat16").datasheet_tflops == 362.1);  // not the L4's
  CHECK(datasheet_peak("NVIDIA L4", "bfloat16").datasheet_tflops == 121.0);
  const PeakFlops unknown = datasheet_peak("Some Future GPU", "bfloat16");
  CHECK(unknown.datasheet_tflops == 0.0);
  CHECK(unknown.source() == "none");
}

TEST_CASE("MFU is the achieved TFLOP/s over the devices' peak, and the measured GEMM is the CPU's peak") {
  ModelFlops f;
  f.params = 1000000;
  f.layers = 2;
  f.width = 64;
  f.sequence = 128;
  f.per_token = 6.0 * 1e6 + 12.0 * 2 * 64 * 128;
  PeakFlops gpu = datasheet_peak("NVIDIA H200", "bfloat16");
  gpu.measured_tflops = 700.0;
  const Utilization u = utilization(f, 5e7, 2, gpu);
  CHECK(u.achieved_tflops == Approx(5e7 * f.per_token / 1e12));
  CHECK(u.mfu == Approx(u.achieved_tflops / (2 * 989.4)));
  CHECK(u.mfu_of_measured == Approx(u.achieved_tflops / (2 * 700.0)));
  CHECK_THAT(utilization_text(u), Catch::Contains("MFU ") && Catch::Contains("of 2 x 989.4 TFLOP/s (datasheet: NVIDIA H200"));

  PeakFlops cpu;
  cpu.measured_tflops = 0.25;
  cpu.measured = "oneDNN";
  CHECK(cpu.tflops() == 0.25);
  CHECK(utilization(f, 1e4, 1, cpu).mfu == Approx(1e4 * f.per_token / 1e12 / 0.25));
  CHECK(utilization(f, 1e4, 1, PeakFlops{}).mfu == 0.0);  // no peak: no MFU, not a division by zero
}

TEST_CASE("the CPU's GEMM probe measures float32 (and bfloat16 where oneDNN has it), and a float16 product not at all") {
  const double f32 = measure_gemm_tflops(Device::cpu(), "float32", 256, 2);
  CHECK(f32 > 1e-4);   // a 256^3 product takes well under a second: more than 0.1 GFLOP/s
  CHECK(f32 < 100.0);  // and not a timer's zero
  const PeakFlops p = device_peak(Device::cpu(), config::Precision::kFloat32, 1, false);
  CHECK(p.datasheet_tflops == 0.0);
  CHECK(p.measured_tflops > 0.0);
  CHECK_THAT(p.source(), Catch::StartsWith("measured: oneDNN 1024x1024x1024 float32 GEMM, 1 thread"));
  CHECK(measure_gemm_tflops(Device::cpu(), "float16", 64, 1) == 0.0);
}
