// validate_job() and bench_train(): the trainer's entry points that do not train a whole job.
#include <cstdio>
#include <functional>

#include "core/strings.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "kernels/device.h"
#include "nn/sequential.h"
#include "plan/plan_memory.h"
#include "strategy/strategy.h"
#include "trainer/setup/job_setup.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {
namespace {

void validate_source(const data::DataSourceSpec& spec, const nn::Sequential& model) {
  // A full read (a second or so for Fashion-MNIST): it also finds truncated data
  // and labels outside the model's classes, which headers alone cannot show.
  const auto dataset = load_checked(spec, model);
  // A sequence's labels: "labels 0..255, 128 per sample".
  const std::string per_sample =
      dataset->label_width > 1 ? str(", ", dataset->label_width, " per sample") : std::string();
  std::printf("ok   %s: %s, %lld samples of shape %s, labels 0..%d%s\n", spec.path.c_str(),
              spec.format->name.c_str(), static_cast<long long>(dataset->count),
              shape_str(dataset->sample_shape).c_str(), dataset->max_label, per_sample.c_str());
}

}  // namespace

void validate_job(const job::JobConfig& job, const plan::ExecutionPlan& plan) {
  std::printf("ok   %s: valid JSON, every key known, values in range\n", job.source.c_str());
  // As this task would hold it (a training task of the cluster; one task without one).
  check_memory(job, plan.memory ? *plan.memory : plan::task_memory(job, 1, 0, nullptr));
  const nn::Sequential model(job.model, job.train.seed);
  std::printf("ok   model: %zu layers, %s -> %s, %lld params\n", model.layers().size(),
              shape_str(model.input_shape()).c_str(), shape_str(model.output_shape()).c_str(),
              static_cast<long long>(model.count_params(false)));
  // Checks strategy, loss and optimizer settings (a strategy that needs other
  // tasks is checked against the cluster when the job runs).
  if (plan.builds_alone) strategy::make_strategy(job.strategy_job(), {nullptr, 1});
  std::printf("ok   strategy: %s; loss: %s; optimizer: %s\n", plan.strategy->name.c_str(),
              nn::loss_type_of(job.loss).name.c_str(), optim::optimizer_type_of(job.optimizer).name.c_str());
  // The precision against where the job would train ("cpu:0 ..." or a GPU).
  check_precision(job, plan.device());
  std::string devices;
  for (const Device& d : plan.replicas) devices += (devices.empty() ? "" : ", ") + describe_device(d);
  const plan::Decision* why = plan.decision("device");
  std::printf("ok   device: \"%s\": %s%s\n", job.device.c_str(), devices.c_str(),
              why && !why->why.empty() ? str(" (", why->why, ")").c_str() : "");
  validate_source(job.data.train, model);
  if (job.data.has_test) validate_source(job.data.test, model);
  if (job.data.has_validation) validate_source(job.data.validation, model);
}

BenchResult bench_train(const job::JobConfig& job, const plan::ExecutionPlan& plan, const BenchOptions& options) {
  BenchResult result;
  apply_threads(plan);
  result.threads = plan.threads;
  const Device device = prepare_device(job, plan);
  result.device = device.str();
  result.precision = config::precision_name(job.train.precision);
  if (device.is_cpu() && job.train.precision == config::Precision::kMixedBfloat16)
    result.cpu_bf16 = kernels::cpu_bf16_name(kernels::cpu_bf16());
  auto strategy = strategy::make_strategy(job.strategy_job(), strategy_context(plan, nullptr, nullptr));
  const int worker_rank = strategy->data_shard().index;
  const int num_workers = strategy->data_shard().count;
  auto dataset = load_checked(task_source(job, worker_rank, num_workers), strategy->model_shapes());
  const int64_t prefetch = plan.prefetch;
  data::PipelineOptions po = train_pipeline_options(job, *strategy, worker_rank, num_workers, prefetch);
  po.drop_remainder = true;  // every timed step has the full batch
  data::Pipeline pipeline(dataset, po);
  (void)steps_per_epoch(job, *strategy, pipeline);  // a batch larger than the data: an error, not an endless read

  int64_t epoch = 0, step = 0;
  pipeline.start_epoch(epoch);
  const size_t k = static_cast<size_t>(job.train.gradient_accumulation_steps);
  std::vector<data::Batch> micro_batches(k), upcoming(k);
  auto read = [&](std::vector<data::Batch>& batches) {
    for (auto& b : batches)
      while (!pipeline.next(b)) pipeline.start_epoch(++epoch);
  };
  // The trainer's order: the next step's batches are read (and, on a GPU,
  // copied) while this step computes.
  read(upcoming);
  nn::LossStats stats;
  auto one_step = [&] {
    micro_batches.swap(upcoming);
    read(upcoming);
    strategy->train_step(micro_batches, step++, stats, strategy->wants_upcoming() ? &upcoming : nullptr);
  };
  for (int64_t i = 0; i < options.warmup_steps; ++i) one_step();
  const strategy::StepTimings before = strategy->timings();
  Stopwatch timer;
  int64_t samples = 0;
  for (int64_t i = 0; i < options.steps; ++i) {
    one_step();
    for (const auto& b : micro_batches) samples += b.size();
  }
  kernels::synchronize(device);
  result.seconds = timer.seconds();
  if (options.profile_steps > 0) {
    // Separate steps, so the waits around each layer do not slow the timed ones.
    nn::Sequential& model = strategy->model();
    model.set_profiling(true);
    Stopwatch profiled;
    for (int64_t i = 0; i < options.profile_steps; ++i) one_step();
    kernels::synchronize(device);
    result.profile_step_ms = profiled.seconds() * 1000.0 / options.profile_steps;
    const double per_step_ms = 1000.0 / static_cast<double>(options.profile_steps);
    std::function<void(nn::Layer&, int)> add = [&](nn::Layer& layer, int depth) {
      result.profile.push_back({layer.name(), layer.type(), depth, layer.time().forward_seconds * per_step_ms,
                                layer.time().backward_seconds * per_step_ms});
      for (nn::Layer* child : layer.children()) add(*child, depth + 1);
    };
    for (const auto& layer : model.layers()) add(*layer, 0);
    model.set_profiling(false);
  }
  const strategy::StepTimings after = strategy->timings();
  const double step_seconds = after.step_seconds - before.step_seconds;
  result.comm_wait_share = step_seconds > 0 ? (after.comm_wait_seconds - before.comm_wait_seconds) / step_seconds : 0.0;
  result.steps = options.steps;
  result.batch_size = job.train.batch_size_per_replica;
  // This task's samples; every data shard trains the same number, so the job's
  // rate is this x shards (a pipeline's stages share their copy's samples).
  result.samples_per_sec = samples * num_workers / std::max(result.seconds, 1e-9);
  if (dataset->label_width > 1)
    if (const std::optional<ModelFlops> flops = model_flops(job.model)) {
      const PeakFlops peak = device_peak(device, job.train.precision, plan.threads, /*thorough=*/true);
      result.utilization = utilization(*flops, result.samples_per_sec * static_cast<double>(dataset->label_width),
                                       plan.training_tasks * plan.local_replicas(), peak);
      read_peak_memory(device, *result.utilization);
    }
  return result;
}

}  // namespace dtrain::trainer
