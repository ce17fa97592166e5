// Setting up where a task computes, from its execution plan: threads, the
// device made ready, train.precision checked there, the strategy's context.
#include <cstdio>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "trainer/setup/job_setup.h"

namespace dtrain::trainer {
namespace {

// Logs the notice of the plan's decision about `what`, if it has one.
void log_notice(const plan::ExecutionPlan& plan, const std::string& what) {
  if (const plan::Decision* d = plan.decision(what); d && !d->notice.empty()) log::info(d->notice);
}

}  // namespace

void apply_threads(const plan::ExecutionPlan& plan) {
  log_notice(plan, "threads");
  kernels::set_num_threads(plan.threads);
}

void check_precision(const job::JobConfig& job, const Device& device) {
  const config::Precision precision = job.train.precision;
  if (precision == config::Precision::kFloat32) return;
  const std::string where = str(job.train.path, ".precision: \"", config::precision_name(precision), "\"");
  if (!device.is_cpu()) {
    const bool f16 = precision == config::Precision::kMixedFloat16;
    log::info(where, " on ", device.str(), ": Dense, Conv2D, pooling, activations and dropout compute in ",
              f16 ? "float16 (with dynamic loss scaling)" : "bfloat16",
              "; batch normalization, softmax and the loss in float32");
    return;
  }
  if (precision == config::Precision::kMixedFloat16)
    throw ConfigError(str(where, " cannot train on the CPU: this build's oneDNN (2.6) has no float16 CPU kernels "
                          "(it runs ", kernels::cpu_isa(), "; native float16 math needs avx512_fp16); use "
                          "\"mixed_bfloat16\" on the CPU (bfloat16 has float32's range: no loss scaling needed)"));
  if (kernels::cpu_bf16() != kernels::CpuBf16::kNative)
    log::warn(where, ": bfloat16: ", kernels::cpu_bf16_description());
}

Device prepare_device(const job::JobConfig& job, const plan::ExecutionPlan& plan) {
  if (plan.allow_tf32) kernels::set_allow_tf32(*plan.allow_tf32);
  log_notice(plan, "device");
  const Device device = plan.device().is_cpu() ? Device::cpu() : kernels::select_device(plan.device().str());
  check_precision(job, device);
  return device;
}

std::string describe_device(const Device& device) {
  if (device.is_cpu()) return device.str();
  for (const kernels::GpuInfo& g : kernels::list_gpus().gpus)
    if (g.index == device.index) {
      char memory[32];
      std::snprintf(memory, sizeof memory, "%.1f GiB", static_cast<double>(g.total_bytes) / (1u << 30));
      return str(device.str(), " (", g.name, ", ", memory, ", sm_", g.compute_major, g.compute_minor, ")");
    }
  return device.str();
}

strategy::StrategyContext strategy_context(const plan::ExecutionPlan& plan, comm::Communicator* workers,
                                           comm::Communicator* gradients) {
  strategy::StrategyContext context{workers, plan.threads, plan.device()};
  context.replicas = plan.replicas;
  context.local_nccl = plan.gradients == plan::Gradients::kLocalNccl;
  context.gradient_path = plan.gradients;
  context.gradients = gradients;
  if (plan.split) {
    context.stage_starts = plan.split->starts;
    context.stage_split_how = plan.split->how;
  }
  return context;
}

}  // namespace dtrain::trainer
