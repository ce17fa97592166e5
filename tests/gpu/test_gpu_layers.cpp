// Whole models on the GPU against the CPU: with the same initial params and the
// same batch, a training-mode forward and backward give the same outputs, the
// same gradients and the same batch-norm moving statistics through every layer
// of a ResNet-style model (Conv2D, BatchNormalization, Activation, Residual with
// identity and projection shortcuts, GlobalAveragePooling2D, Dense).
// Labelled gpu: skipped (reported as skipped) on machines without a usable GPU.
#include <catch2/catch.hpp>

#include "gpu/gpu_skip.h"
#include "kernels/device.h"
#include "nn/sequential.h"
#include "unit/tensor_checks.h"

using namespace dtrain;

namespace {

// conv-bn-relu-conv-bn plus the input (or a strided 1x1 conv and bn), then relu.
std::string basic_block(int filters, int stride, bool project) {
  const auto conv = [](int f, int k, int s) {
    return "{\"type\": \"Conv2D\", \"filters\": " + std::to_string(f) + ", \"kernel_size\": " + std::to_string(k) +
           ", \"strides\": " + std::to_string(s) + ", \"padding\": \"same\", \"use_bias\": false}";
  };
  const std::string bn = "{\"type\": \"BatchNormalization\"}";
  const std::string relu = "{\"type\": \"Activation\", \"activation\": \"relu\"}";
  return "{\"type\": \"Residual\", \"activation\": \"relu\", \"layers\": [" + conv(filters, 3, stride) + ", " + bn +
         ", " + relu + ", " + conv(filters, 3, 1) + ", " + bn + "], \"shortcut\": [" +
         (project ? conv(filters, 1, stride) + ", " + bn : std::string()) + "]}";
}

nn::ModelSpec small_resnet() {
  const config::Document doc(
      "{\"input_shape\": [16, 16, 3], \"layers\": [{\"type\": \"Conv2D\", \"filters\": 16, \"kernel_size\": 3, "
      "\"padding\": \"same\", \"use_bias\": false}, {\"type\": \"BatchNormalization\"}, "
      "{\"type\": \"Activation\", \"activation\": \"relu\"}, " +
          basic_block(16, 1, false) + ", " + basic_block(32, 2, true) +
          ", {\"type\": \"GlobalAveragePooling2D\"}, {\"type\": \"Dense\", \"units\": 10}]}",
      "model");
  return nn::read_model_spec(doc.root());
}

}  // namespace

TEST_CASE("gpu layers: a ResNet-style model gives the CPU's outputs, gradients and moving statistics") {
  if (!testing::gpu_or_skip()) return;
  // Compare float32 with float32; TF32 back on however the test ends.
  struct Tf32Off {
    Tf32Off() { kernels::set_allow_tf32(false); }
    ~Tf32Off() { kernels::set_allow_tf32(true); }
  } tf32_off;
  const nn::ModelSpec spec = small_resnet();
  nn::Sequential cpu(spec, 1), gpu(spec, 1);
  cpu.place(Device::cpu(), 0);
  gpu.place(Device::cuda(0), 0);
  REQUIRE(gpu.params_sha256() == cpu.params_sha256());

  const Tensor x = testing::random_tensor({8, 16, 16, 3}, 3);
  const nn::StepContext ctx{true, 1, 0};
  const Tensor y_cpu = cpu.forward(x, ctx);
  const Tensor y_gpu = gpu.forward(x.to(gpu.device()), ctx);
  {
    INFO("model output");
    testing::require_close(y_gpu, y_cpu, 1e-3, 1e-3);
  }
  const Tensor dy = testing::random_tensor(y_cpu.shape(), 4);
  cpu.backward(dy);
  gpu.backward(dy.to(gpu.device()));
  const std::vector<nn::Param*> want = cpu.params(), got = gpu.params();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(want[i]->name);
    REQUIRE(got[i]->name == want[i]->name);
    testing::require_close(got[i]->value, want[i]->value, 1e-4, 1e-4);  // moving statistics after one step
    if (want[i]->trainable()) testing::require_close(got[i]->grad, want[i]->grad, 2e-3, 2e-3);
  }
}
