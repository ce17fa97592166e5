// validate_job() and bench_train(): the trainer's entry points that do not train a whole job.
#include <cstdio>

#include "core/strings.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "nn/sequential.h"
#include "strategy/strategy.h"
#include "trainer/job_setup.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {
namespace {

void validate_source(const config::DataSourceSpec& spec, const nn::Sequential& model) {
  const data::DatasetInfo info = data::probe_dataset(spec);
  check_input_shape(spec, info.sample_shape, model);
  std::printf("ok   %s: %s, %lld samples of shape %s\n", spec.path.c_str(), spec.format.c_str(),
              static_cast<long long>(info.count), shape_str(info.sample_shape).c_str());
}

}  // namespace

void validate_job(const config::JobConfig& job) {
  std::printf("ok   %s: valid JSON, every key known, values in range\n", job.source.c_str());
  const nn::Sequential model(job.model, job.train.seed);
  std::printf("ok   model: %zu layers, %s -> %s, %lld params\n", model.layers().size(),
              shape_str(model.input_shape()).c_str(), shape_str(model.output_shape()).c_str(),
              static_cast<long long>(model.count_params(false)));
  strategy::make_strategy(job);  // checks strategy, loss and optimizer settings
  std::printf("ok   strategy: %s; loss: %s; optimizer: %s\n", job.strategy.type.c_str(),
              job.loss.type.c_str(), job.optimizer.type.c_str());
  validate_source(job.data.train, model);
  if (job.data.has_test) validate_source(job.data.test, model);
}

BenchResult bench_train(const config::JobConfig& job, const BenchOptions& options) {
  BenchResult result;
  result.threads = setup_threads(job);
  auto strategy = strategy::make_strategy(job);
  auto dataset = load_checked(job.data.train, strategy->model());
  data::PipelineOptions po;
  po.batch_size = job.train.batch_size_per_replica;
  po.shuffle_buffer = job.data.shuffle_buffer;
  po.seed = job.train.seed;
  po.drop_remainder = true;  // every timed step has the full batch
  po.prefetch = job.data.prefetch;
  po.cache = job.data.cache;
  data::Pipeline pipeline(dataset, po);

  int64_t epoch = 0, step = 0;
  pipeline.start_epoch(epoch);
  data::Batch batch;
  auto next_batch = [&] {
    while (!pipeline.next(batch)) pipeline.start_epoch(++epoch);
  };
  nn::LossStats stats;
  for (int64_t i = 0; i < options.warmup_steps; ++i) {
    next_batch();
    strategy->train_step(batch, step++, stats);
  }
  Stopwatch timer;
  int64_t samples = 0;
  for (int64_t i = 0; i < options.steps; ++i) {
    next_batch();
    strategy->train_step(batch, step++, stats);
    samples += batch.size();
  }
  result.seconds = timer.seconds();
  result.steps = options.steps;
  result.batch_size = po.batch_size;
  result.samples_per_sec = samples / std::max(result.seconds, 1e-9);
  return result;
}

}  // namespace dtrain::trainer
