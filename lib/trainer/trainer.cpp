// The training loop: epochs of train steps through the strategy, evaluation on the
// test data after each epoch, progress on stdout, metrics.jsonl and the summary.
#include "trainer/trainer.h"

#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"
#include "strategy/strategy.h"
#include "trainer/callback_runner.h"
#include "trainer/checkpointing.h"
#include "trainer/job_setup.h"
#include "strategy/registry.h"
#include "trainer/progress.h"
#include "trainer/ps_training.h"
#include "trainer/records.h"

namespace dtrain::trainer {

RunSummary run_training(const job::JobConfig& job, const RunOptions& options) {
  // A pipeline's stages (measured on the chief for "auto"), then the memory
  // estimate, printed and held against runtime.memory_limit before any model of
  // this task is allocated.
  const bool parameter_server =
      strategy::entry_of(job.strategy).cross_task == strategy::CrossTask::kParameterServer;
  const int threads = parameter_server ? 0 : setup_threads(job, options.host);  // (ps_training's own)
  const std::optional<strategy::StageSplit> split = plan_pipeline(job, options.workers);
  const strategy::MemoryEstimate memory = check_task_memory(job, options.workers ? options.workers->size() : 1,
                                                               options.workers ? options.workers->rank() : 0,
                                                               split ? &*split : nullptr);
  if (parameter_server)
    return options.ps.coordinator ? run_ps_coordinator(job, options) : run_ps_worker(job, options);
  Stopwatch wall;
  RunSummary summary;
  summary.memory = memory;
  summary.threads = threads;
  const Device device = select_job_device(job, options.host);
  summary.device = device.str();
  std::unique_ptr<comm::Communicator> gradients;  // outlives the strategy
  if (options.connect_gradients && !device.is_cpu()) gradients = options.connect_gradients(device);
  strategy::StrategyContext context{options.workers, summary.threads, device};
  context.gradients = gradients.get();
  if (options.connect_device_pair && !device.is_cpu())
    context.connect_device_pair = [&options, device](const std::string& name, int rank) {
      return options.connect_device_pair(device, name, rank);
    };
  if (split) {
    context.stage_starts = split->starts;
    context.stage_split_how = split->how;
  }
  auto strategy = strategy::make_strategy(job.strategy_job(), context);
  nn::Sequential& model = strategy->model();
  // The part of the data this task reads: its rank's shard (data parallelism), its
  // pipeline copy's (every stage of a copy reads the same records).
  const int worker_rank = strategy->data_shard().index;
  const int num_workers = strategy->data_shard().count;
  std::printf("Model: %lld params, strategy %s, %s, %d threads\n%s",
              static_cast<long long>(model.count_params(false)), strategy->name().c_str(),
              describe_device(device).c_str(), summary.threads, model.summary().c_str());

  Stopwatch load_time;
  auto train_data = load_checked(task_source(job, worker_rank, num_workers), strategy->model_shapes());
  std::shared_ptr<data::Dataset> test_data;
  if (job.data.has_test) test_data = load_checked(job.data.test, strategy->model_shapes());
  const int64_t prefetch = prefetch_batches(job, options.host, summary.threads, strategy->local_replicas(), device);
  data::Pipeline train_pipeline(train_data, train_pipeline_options(job, *strategy, worker_rank, num_workers, prefetch));
  std::unique_ptr<data::Pipeline> test_pipeline;
  if (test_data) test_pipeline = std::make_unique<data::Pipeline>(test_data, eval_pipeline_options(job, prefetch));
  std::printf("Data: %lld training samples%s (loaded in %.2fs)\n", static_cast<long long>(train_data->count),
              test_data ? str(", ", test_data->count, " test samples").c_str() : "", load_time.seconds());

  const int64_t accumulation = job.train.gradient_accumulation_steps;
  int64_t steps_per_epoch = train_pipeline.batches_per_epoch() / accumulation;
  if (job.train.steps_per_epoch > 0) steps_per_epoch = std::min(steps_per_epoch, job.train.steps_per_epoch);
  if (steps_per_epoch == 0)
    throw ConfigError(str("train.batch_size_per_replica: ", job.train.batch_size_per_replica, " x ",
                          strategy->local_replicas(), " replica(s) x ", accumulation,
                          " accumulation step(s) is more than the ", train_pipeline.samples_per_epoch(),
                          " training samples this task sees per epoch; use a smaller batch"));

  // Samples of one update across the job.
  const int64_t global_batch = job.train.batch_size_per_replica * strategy->num_replicas_in_sync() * accumulation;
  Checkpointer checkpointer(job, *strategy, options.workers);
  const ResumePoint start = checkpointer.resume(global_batch, steps_per_epoch);
  // The learning rate of the update after `steps_done` steps: under loss scaling
  // the optimizer's step count leaves out skipped steps.
  const auto learning_rate = [&](int64_t steps_done) {
    const int64_t step = std::max<int64_t>(0, steps_done - 1);
    const optim::DynamicLossScale* scale = strategy->loss_scale();
    return strategy->optimizer().learning_rate(scale ? std::max<int64_t>(0, scale->applied_before(step)) : step);
  };
  CallbackRunner callbacks(job, *strategy, options.workers);
  callbacks.resume(start.callbacks_json);

  MetricsLog metrics(options.write_metrics ? job.output.dir : std::string(), /*append=*/start.resumed,
                     options.write_metrics ? tensorboard_dir(job) : std::string());
  Progress progress(stdout_is_terminal());
  summary.epochs = job.train.epochs;
  int64_t global_step = start.global_step;
  double train_seconds = 0.0, data_seconds = 0.0;
  int64_t train_samples = 0, trained_steps = 0;
  for (int64_t epoch = start.epoch; epoch < job.train.epochs; ++epoch) {
    Stopwatch epoch_time;
    const strategy::StepTimings timings_before = strategy->timings();
    nn::LossStats epoch_stats, window_stats;
    Stopwatch window_time;
    train_pipeline.start_epoch(epoch);
    std::vector<data::Batch> micro_batches(static_cast<size_t>(accumulation));
    std::vector<data::Batch> upcoming(static_cast<size_t>(accumulation));
    bool have_upcoming = false;  // read one step ahead for a GPU, which copies it while computing
    int64_t step_in_epoch = 0;
    if (epoch == start.epoch && start.step_in_epoch > 0) {
      // Resuming mid-epoch: the epoch's order is a function of (seed, epoch), so
      // skipping the batches already trained on continues exactly where it stopped.
      data::Batch skipped;
      for (int64_t i = 0; i < start.step_in_epoch * accumulation; ++i)
        DT_CHECK(train_pipeline.next(skipped), "the pipeline ran out of batches while resuming");
      step_in_epoch = start.step_in_epoch;
    }
    while (step_in_epoch < steps_per_epoch) {
      const trace::Span step_span("step", "step");
      Stopwatch data_time;
      {
        const trace::Span data_span("data", "data");
        if (have_upcoming) {
          micro_batches.swap(upcoming);
          have_upcoming = false;
        } else {
          for (auto& b : micro_batches) DT_CHECK(train_pipeline.next(b), "the pipeline ran out of batches early");
        }
        if (strategy->wants_upcoming() && step_in_epoch + 1 < steps_per_epoch) {
          for (auto& b : upcoming) DT_CHECK(train_pipeline.next(b), "the pipeline ran out of batches early");
          have_upcoming = true;
        }
      }
      data_seconds += data_time.seconds();
      ++trained_steps;
      nn::LossStats step_stats;
      if (options.stop_requested && options.stop_requested()) strategy->request_stop();
      strategy->train_step(micro_batches, global_step, step_stats, have_upcoming ? &upcoming : nullptr);
      if (!std::isfinite(step_stats.loss_sum))
        throw RuntimeError(str("the loss became ", step_stats.loss_sum, " at step ", global_step + 1,
                               " (epoch ", epoch + 1, "); lower optimizer.learning_rate or check the data"));
      epoch_stats.add(step_stats);
      window_stats.add(step_stats);
      ++step_in_epoch;
      ++global_step;
      if (options.on_step) options.on_step(global_step);
      checkpointer.after_step(global_step, epoch, step_in_epoch, global_batch);
      if (strategy->stop_agreed()) {
        const std::string saved = checkpointer.save_now(global_step, epoch, step_in_epoch, global_batch);
        throw Preempted(str("stopped by SIGTERM after step ", global_step,
                            saved.empty() ? std::string("; no checkpoint saved (set checkpoint.dir or output.dir)")
                                          : str("; checkpoint ", saved, " saved: resume with --resume")));
      }
      const double elapsed = epoch_time.seconds();
      progress.step(epoch + 1, job.train.epochs, step_in_epoch, steps_per_epoch, mean_loss(epoch_stats),
                    accuracy(epoch_stats), epoch_stats.count / std::max(elapsed, 1e-9));
      if (job.train.log_every_steps > 0 && global_step % job.train.log_every_steps == 0) {
        metrics.step(epoch + 1, global_step, mean_loss(window_stats), accuracy(window_stats),
                     learning_rate(global_step),
                     window_stats.count / std::max(window_time.seconds(), 1e-9));
        window_stats = {};
        window_time.reset();
      }
    }
    const double seconds = epoch_time.seconds();
    train_seconds += seconds;
    train_samples += epoch_stats.count;

    EpochReport report = epoch_report(epoch + 1, job.train.epochs, step_in_epoch, seconds, epoch_stats);
    report.learning_rate = learning_rate(global_step);
    if (const optim::DynamicLossScale* scale = strategy->loss_scale()) report.loss_scale = scale->scale();
    const strategy::StepTimings timings_after = strategy->timings();
    const double step_seconds = timings_after.step_seconds - timings_before.step_seconds;
    report.comm_wait_share =
        step_seconds > 0 ? (timings_after.comm_wait_seconds - timings_before.comm_wait_seconds) / step_seconds : 0.0;
    strategy->sync_state();
    if (test_pipeline) {
      const nn::LossStats val = evaluate(*strategy, *test_pipeline);
      report.has_validation = true;
      report.val_loss = mean_loss(val);
      report.val_accuracy = accuracy(val);
      summary.test_loss = report.val_loss;
      summary.test_accuracy = report.val_accuracy;
    }
    const CallbackRunner::Decision decision = callbacks.on_epoch_end(epoch, report);
    checkpointer.set_callbacks_state(callbacks.state_json());
    const bool last = epoch + 1 == job.train.epochs || decision.stop;
    // The epoch's checkpoint holds the epoch's parameters (the test figures are of
    // them), also when restore_best_weights then puts an earlier epoch's back, as
    // Keras' ModelCheckpoint saves before EarlyStopping restores.
    checkpointer.after_epoch(global_step, epoch + 1, global_batch, options.final_checkpoint && last, decision.save);
    progress.epoch_done(report);
    metrics.epoch(report, global_step);
    summary.train_loss = report.loss;
    summary.train_accuracy = report.accuracy;
    if (decision.stop) summary.stopped_epoch = epoch + 1;
    if (last) {
      if (const std::optional<EpochReport> best = callbacks.restore_best()) {
        summary.restored_epoch = best->epoch;
        if (best->has_validation) {
          summary.test_loss = best->val_loss;
          summary.test_accuracy = best->val_accuracy;
        }
      }
      break;
    }
  }

  if (summary.stopped_epoch > 0) summary.epochs = summary.stopped_epoch;
  summary.steps = global_step;
  summary.world_size = strategy->num_replicas_in_sync();
  summary.global_batch_size = job.train.batch_size_per_replica * summary.world_size;
  summary.gradient_accumulation_steps = static_cast<int>(accumulation);
  const strategy::StepTimings timings = strategy->timings();
  summary.comm_wait_share = timings.step_seconds > 0 ? timings.comm_wait_seconds / timings.step_seconds : 0.0;
  if (trained_steps > 0) {
    const double ms = 1000.0 / static_cast<double>(trained_steps);
    StepBreakdown b;
    b.step = train_seconds * ms;  // epochs' time, evaluation excluded
    b.data = data_seconds * ms;
    b.compute = timings.compute_seconds * ms;
    b.gradient_wait = timings.comm_wait_seconds * ms;
    b.update = timings.update_seconds * ms;
    b.metrics = timings.metrics_seconds * ms;
    b.other = std::max(0.0, b.step - b.data - b.compute - b.gradient_wait - b.update - b.metrics);
    summary.step_ms = b;
    std::printf("Step: %.3f ms = data %.3f + compute %.3f + gradient wait %.3f + update %.3f + loss all-reduce %.3f "
                "+ other %.3f\n",
                b.step, b.data, b.compute, b.gradient_wait, b.update, b.metrics, b.other);
  }
  summary.train_samples_per_sec = train_samples / std::max(train_seconds, 1e-9);
  summary.params_sha256 = strategy->params_sha256();
  summary.strategy_report = strategy->report_json();
  summary.optimizer_state_bytes = strategy->optimizer_state_bytes();
  const int state_shards = strategy->optimizer_state_shards();
  std::printf("Optimizer state: %s on this task%s\n",
              format_bytes(static_cast<double>(summary.optimizer_state_bytes)).c_str(),
              state_shards > 1 ? str(" (sharded 1/", state_shards, ")").c_str() : "");
  if (const optim::DynamicLossScale* scale = strategy->loss_scale()) {
    summary.loss_scale = scale->scale();
    summary.loss_scale_skipped_steps = scale->state().skipped_steps;
    std::printf("Loss scale: %g (%lld step(s) skipped for non-finite gradients)\n", scale->scale(),
                static_cast<long long>(scale->state().skipped_steps));
  }
  summary.wall_seconds = wall.seconds();
  if (summary.test_accuracy >= 0.0)
    std::printf("Test: loss %.4f, accuracy %.4f\n", summary.test_loss, summary.test_accuracy);
  std::printf("Done: %lld steps in %.1fs, %.0f samples/s, params_sha256 %s\n",
              static_cast<long long>(summary.steps), summary.wall_seconds,
              summary.train_samples_per_sec, summary.params_sha256.c_str());
  if (!options.summary_path.empty()) write_summary(options.summary_path, job, summary, strategy->name());
  return summary;
}

}  // namespace dtrain::trainer
