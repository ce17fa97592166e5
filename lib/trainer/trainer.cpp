// run_training(), in three parts: the set-up from the task's plan (threads, a
// pipeline's measured split, the memory check, the device, the strategy, the
// data, where to resume), the training loop (training_loop.h) over the
// strategy's steps (strategy_steps.h), and the report (report.h). A
// parameter_server job's tasks go to ps_training.h after the memory check.
#include "trainer/trainer.h"

#include <cstdio>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process_memory.h"
#include "core/strings.h"
#include "core/timer.h"
#include "trainer/callback_runner.h"
#include "trainer/checkpointing.h"
#include "trainer/elastic_state.h"
#include "trainer/setup/job_setup.h"
#include "trainer/tasks/ps_training.h"
#include "trainer/reporting/records.h"
#include "trainer/reporting/report.h"
#include "trainer/strategy_steps.h"
#include "trainer/training_loop.h"

namespace dtrain::trainer {
namespace {

// What a task that trains through its strategy works with, set up from the plan.
struct StrategyTraining {
  std::unique_ptr<strategy::Strategy> strategy;
  std::unique_ptr<data::Pipeline> train, test;  // test: nullptr without test data
  int64_t steps_per_epoch = 0;
  int64_t global_batch = 0;  // samples of one update across the job
};

StrategyTraining set_up(const job::JobConfig& job, const plan::ExecutionPlan& plan, const RunOptions& options,
                        const Device& device, RunSummary& summary) {
  StrategyTraining t;
  strategy::StrategyContext context = strategy_context(plan, options.workers, options.gradients);
  context.stage_links = options.stage_links;
  context.grid = options.grid;
  const strategy::ElasticSplit* uneven =
      options.elastic && !options.elastic->split.micro_batch.empty() && !options.elastic->split.even()
          ? &options.elastic->split
          : nullptr;
  if (uneven)
    context.mean_replica_rows =
        static_cast<double>(uneven->micro_step()) / static_cast<double>(uneven->micro_batch.size());
  t.strategy = strategy::make_strategy(job.strategy_job(), context);
  strategy::Strategy& s = *t.strategy;
  nn::Sequential& model = s.model();
  // The part of the data this task reads: its rank's shard (data parallelism), its
  // pipeline copy's (every stage of a copy reads the same records).
  const int worker_rank = s.data_shard().index;
  const int num_workers = s.data_shard().count;
  if (options.elastic && shard_policy(job, num_workers) == data::ShardPolicy::kFile)
    throw ConfigError("data.shard_policy: strategy.elastic deals the rest of an epoch's samples out again over the "
                      "tasks that are left, which sharding by file cannot (each task reads only its own files); set "
                      "data.shard_policy to \"data\"");
  // (an elastic job's re-formed groups train the same model on the same data: said once)
  const bool describe = !options.elastic || !options.elastic->described;
  if (options.elastic) options.elastic->described = true;
  if (describe)
    std::printf("Model: %lld params, strategy %s, %s, %d threads\n%s",
                static_cast<long long>(model.count_params(false)), s.name().c_str(), describe_device(device).c_str(),
                summary.threads, model.summary().c_str());

  Stopwatch load_time;
  const int64_t before_data = resident_bytes();
  // (an elastic job's later generations use the data its first one loaded)
  std::shared_ptr<data::Dataset> train_data = options.elastic ? options.elastic->train_data : nullptr;
  std::shared_ptr<data::Dataset> test_data = options.elastic ? options.elastic->test_data : nullptr;
  if (!train_data) train_data = load_checked(task_source(job, worker_rank, num_workers), s.model_shapes());
  if (job.data.has_test && !test_data) test_data = load_checked(job.data.test, s.model_shapes());
  if (options.elastic) options.elastic->train_data = train_data, options.elastic->test_data = test_data;
  data::PipelineOptions train_options = train_pipeline_options(job, s, worker_rank, num_workers, plan.prefetch);
  if (uneven) {  // each member's run of every micro-step's samples
    DT_CHECK(s.local_replicas() == 1 && static_cast<int>(uneven->micro_batch.size()) == num_workers &&
                 train_options.batch_size == uneven->micro_batch[static_cast<size_t>(worker_rank)],
             "elastic: the split of ", uneven->micro_step(), " samples over ", num_workers, " tasks");
    train_options.shard_sizes = uneven->micro_batch;
  }
  t.train = std::make_unique<data::Pipeline>(train_data, train_options);
  if (test_data) t.test = std::make_unique<data::Pipeline>(test_data, eval_pipeline_options(job, plan.prefetch));
  if (describe)
    std::printf("Data: %lld training samples%s (loaded in %.2fs)\n", static_cast<long long>(train_data->count),
                test_data ? str(", ", test_data->count, " test samples").c_str() : "", load_time.seconds());
  if (summary.measured_memory) summary.measured_memory->data = resident_bytes() - before_data;

  const int64_t accumulation = job.train.gradient_accumulation_steps;
  t.steps_per_epoch = steps_per_epoch(job, s, *t.train);
  t.global_batch = job.train.batch_size_per_replica * s.num_replicas_in_sync() * accumulation;
  if (options.elastic) {
    if (!options.elastic->split.micro_batch.empty()) t.global_batch = options.elastic->split.global_batch;
    // The epoch's steps are those of the whole data at the global batch, the
    // same at every size (batch "global"): a re-formed group continues the
    // epoch's count. Every task's shard holds at least its part of them.
    const int64_t steps = train_data->count / t.global_batch;
    DT_CHECK(steps <= t.train->batches_per_epoch() / accumulation, "elastic: a shard is short of the epoch's steps");
    t.steps_per_epoch = job.train.steps_per_epoch > 0 ? std::min(steps, job.train.steps_per_epoch) : steps;
  }
  return t;
}

// What only a strategy's own steps measure: the step time's breakdown, the
// optimizer state it holds, the loss scale.
void report_strategy_steps(const job::JobConfig& job, strategy::Strategy& s, const StrategySteps& steps,
                           const LoopResult& loop, RunSummary& summary) {
  summary.world_size = s.num_replicas_in_sync();
  summary.global_batch_size = job.train.batch_size_per_replica * summary.world_size;
  summary.gradient_accumulation_steps = static_cast<int>(job.train.gradient_accumulation_steps);
  const strategy::StepTimings timings = s.timings();
  summary.comm_wait_share = timings.step_seconds > 0 ? timings.comm_wait_seconds / timings.step_seconds : 0.0;
  if (steps.trained_steps() > 0) {
    const double ms = 1000.0 / static_cast<double>(steps.trained_steps());
    StepBreakdown b;
    b.step = loop.own_seconds * ms;  // the epochs' time of these steps, evaluation excluded
    b.data = steps.data_seconds() * ms;
    b.compute = timings.compute_seconds * ms;
    b.gradient_wait = timings.comm_wait_seconds * ms;
    b.update = timings.update_seconds * ms;
    b.metrics = timings.metrics_seconds * ms;
    b.other = std::max(0.0, b.step - b.data - b.compute - b.gradient_wait - b.update - b.metrics);
    summary.step_ms = b;
    // (the summary's step_ms names: one vocabulary)
    std::printf("Step: %.3f ms = data %.3f + compute %.3f + gradient_wait %.3f + update %.3f + metrics %.3f "
                "+ other %.3f\n",
                b.step, b.data, b.compute, b.gradient_wait, b.update, b.metrics, b.other);
  }
  summary.strategy_report = s.report_json();
  summary.optimizer_state_bytes = s.optimizer_state_bytes();
  const int state_shards = s.optimizer_state_shards();
  std::printf("Optimizer state: %s on this task%s\n",
              format_bytes(static_cast<double>(summary.optimizer_state_bytes)).c_str(),
              state_shards > 1 ? str(" (sharded 1/", state_shards, ")").c_str() : "");
  if (const optim::DynamicLossScale* scale = s.loss_scale()) {
    summary.loss_scale = scale->scale();
    summary.loss_scale_skipped_steps = scale->state().skipped_steps;
    std::printf("Loss scale: %g (%lld step(s) skipped for non-finite gradients)\n", scale->scale(),
                static_cast<long long>(scale->state().skipped_steps));
  }
}

// Where an elastic job's generation starts: the first from the checkpoint as
// any job, a later one from the snapshot of the member the runtime chose
// (taken by every member over the new group). Below min_workers the generation
// only saves that state and stops.
ResumePoint elastic_start(ElasticState& elastic, strategy::Strategy& s, Checkpointer& checkpointer,
                          const RunOptions& options, const StrategyTraining& t) {
  ResumePoint start;
  if (elastic.source_rank >= 0 && options.workers) {
    start = elastic.restore(s, *options.workers, elastic.source_rank, elastic.source_point);
    log::info("elastic: ", options.workers->size(), " training task(s) go on from step ", start.global_step,
              " (the state of group rank ", elastic.source_rank, ", taken by broadcast)");
  } else {
    start = checkpointer.resume(t.global_batch, t.steps_per_epoch);
  }
  // (A loss that came during an epoch's end leaves the snapshot of the epoch's
  // last step: run_epochs then does that epoch's end again at the new size,
  // its evaluation, callbacks and checkpoint included.)
  elastic.capture(s, start);
  if (!elastic.below_minimum.empty()) {
    const std::string saved = checkpointer.save_now(start.global_step, start.epoch, start.step_in_epoch, t.global_batch);
    throw PeerLost(str(elastic.below_minimum, saved.empty()
                                                   ? std::string("; no checkpoint saved (set checkpoint.dir or output.dir)")
                                                   : str("; checkpoint ", saved, " saved: resume with --resume")));
  }
  return start;
}

}  // namespace

RunSummary run_training(const job::JobConfig& job, const plan::ExecutionPlan& task_plan, const RunOptions& options) {
  // Set-up. A pipeline's "auto" stages measured (on the chief), then the memory
  // estimate, printed and held against runtime.memory_limit before any model of
  // this task is allocated.
  if (!task_plan.parameter_server()) apply_threads(task_plan);  // (ps_training's own)
  const plan::ExecutionPlan plan = settle_stage_split(job, task_plan, options.workers);
  // (an elastic job's later generations: the same model, its estimate said once)
  const strategy::MemoryEstimate memory =
      check_memory(job, *plan.memory, /*print=*/!options.elastic || !options.elastic->described);
  if (plan.parameter_server())
    return options.ps.coordinator ? run_ps_coordinator(job, plan, options) : run_ps_worker(job, plan, options);
  Stopwatch wall;
  if (options.elastic && !options.elastic->wall) options.elastic->wall.emplace();  // the job's, across generations
  RunSummary summary;
  summary.memory = memory;
  summary.threads = plan.threads;
  const Device device = prepare_device(job, plan);
  summary.device = device.str();
  summary.measured_memory = RunSummary::MeasuredMemory{resident_bytes()};
  StrategyTraining t = set_up(job, plan, options, device, summary);
  strategy::Strategy& s = *t.strategy;
  summary.label_width = t.train->dataset().label_width;
  Checkpointer checkpointer(job, s, options.workers, options.final_checkpoint);
  const ResumePoint start = options.elastic ? elastic_start(*options.elastic, s, checkpointer, options, t)
                                            : checkpointer.resume(t.global_batch, t.steps_per_epoch);
  CallbackRunner callbacks(job, s, options.workers);
  callbacks.resume(start.callbacks_json);
  MetricsLog metrics(options.write_metrics ? job.output.dir : std::string(), /*append=*/start.resumed,
                     options.write_metrics ? tensorboard_dir(job) : std::string(), summary.label_width);

  // The loop.
  StrategySteps steps(job, s, *t.train, checkpointer, options, t.steps_per_epoch, t.global_batch, start.global_step);
  LoopContext context{job,           s, checkpointer, callbacks, metrics, t.test.get(), t.steps_per_epoch,
                      t.global_batch, summary.label_width, options.elastic};
  // A language model's MFU: on a GPU the peak is known before the loop (its
  // epoch lines say MFU); on the CPU the GEMM is measured after it.
  const std::optional<ModelFlops> flops = summary.label_width > 1 ? model_flops(job.model) : std::nullopt;
  const int devices = plan.training_tasks * plan.local_replicas();
  std::optional<PeakFlops> peak;
  if (flops && !device.is_cpu()) {
    peak = device_peak(device, job.train.precision, plan.threads, /*thorough=*/false);
    context.flops_per_token = flops->per_token;
    context.peak_tflops = static_cast<double>(devices) * peak->tflops();
  }
  summary.measured_memory->peak_from_loop = reset_peak_resident();
  const LoopResult loop = run_epochs(context, steps, start);
  summary.measured_memory->peak = peak_resident_bytes();
  // (the CPU's GEMM probe takes a moment: only the task that reports the job's
  // figures, the chief or a lone task, measures it; a GPU's peak is known already)
  if (flops && loop.train_seconds > 0 && (peak || options.write_metrics)) {
    if (!peak) peak = device_peak(device, job.train.precision, plan.threads, /*thorough=*/false);
    const double tokens_per_sec = static_cast<double>(loop.train_samples) / loop.train_seconds *
                                  static_cast<double>(summary.label_width);
    summary.utilization = utilization(*flops, tokens_per_sec, devices, *peak);
    read_peak_memory(device, *summary.utilization);
    if (device.is_cpu()) summary.utilization->peak_memory_bytes = summary.measured_memory->peak;  // (the loop's)
  }

  // The report.
  report_strategy_steps(job, s, steps, loop, summary);
  if (options.elastic) summary.membership_changes = options.elastic->changes;
  report_run(job, options, s, loop, options.elastic ? options.elastic->wall->seconds() : wall.seconds(), "", summary);
  return summary;
}

}  // namespace dtrain::trainer
