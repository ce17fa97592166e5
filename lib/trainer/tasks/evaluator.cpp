// The evaluator task (trainer.h's run_evaluator), TF's side-car evaluation: it
// trains nothing; it looks at the checkpoint directory every poll_seconds and
// evaluates each complete checkpoint newer than the last one it evaluated, oldest
// first, on a one_device copy of the model. It stops after the checkpoint of the
// final step, which the training tasks save before they report the end
// (RunOptions::final_checkpoint). A checkpoint pruned or found corrupt before it
// could be read is skipped with a warning; one still being written (no DONE yet)
// is looked at again on the next poll.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "checkpoint/checkpoint_store.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "trainer/checkpointing.h"
#include "trainer/setup/job_setup.h"
#include "trainer/reporting/records.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {
namespace {

namespace fs = std::filesystem;

const data::DataSourceSpec& evaluation_source(const job::JobConfig& job) {
  return job.data.has_validation ? job.data.validation : job.data.test;
}

// Loads one checkpoint's parameters and evaluates them; nullopt (with a warning)
// when it vanished or is corrupt.
std::optional<Evaluation> evaluate_checkpoint(const checkpoint::CheckpointEntry& entry, strategy::Strategy& strategy,
                                              data::Pipeline& pipeline) {
  checkpoint::LoadedCheckpoint ckpt;
  try {
    ckpt = checkpoint::CheckpointStore::load(entry.path);
  } catch (const IoError& e) {
    if (!fs::exists(entry.path))
      log::warn("evaluator: checkpoint ", entry.path, " was pruned before it could be evaluated (raise checkpoint.keep)");
    else
      log::warn("evaluator: skipping checkpoint ", entry.path, ": ", e.what());
    return std::nullopt;
  }
  strategy.load_state([&](const std::string& n) { return ckpt.model.find(n); },
                      [&](const std::string& n) { return ckpt.optimizer.find(n); });
  const nn::LossStats stats = evaluate(strategy, pipeline);
  return Evaluation{ckpt.manifest.step, mean_loss(stats), accuracy(stats), entry.path};
}

}  // namespace

void check_evaluator_job(const job::JobConfig& job) {
  if (checkpoint_dir(job).empty())
    throw ConfigError("the cluster has an evaluator task, which evaluates the checkpoints the chief saves: set "
                      "checkpoint.dir or output.dir");
  if (!job.data.has_test && !job.data.has_validation)
    throw ConfigError("the cluster has an evaluator task but the job has no data to evaluate on: set data.test or "
                      "data.validation");
}

RunSummary run_evaluator(const job::JobConfig& job, const plan::ExecutionPlan& plan, const EvaluatorOptions& options) {
  check_evaluator_job(job);
  Stopwatch wall;
  RunSummary summary;
  apply_threads(plan);
  summary.threads = plan.threads;
  const Device device = prepare_device(job, plan);
  summary.device = device.str();
  const strategy::StrategySpec one_device;  // evaluation runs on one replica, whatever trains
  auto strategy = strategy::make_strategy({one_device, job.model, job.loss, job.optimizer, job.train},
                                          {nullptr, summary.threads, device});
  const data::DataSourceSpec& source = evaluation_source(job);
  data::Pipeline pipeline(load_checked(source, strategy->model()), eval_pipeline_options(job, plan.prefetch));
  const std::string dir = checkpoint_dir(job);
  std::printf("Evaluator: watching %s; each checkpoint evaluated on %s (%s, %d threads)\n", dir.c_str(),
              source.path.c_str(), describe_device(device).c_str(), summary.threads);
  std::fflush(stdout);

  summary.label_width = pipeline.dataset().label_width;
  MetricsLog metrics(job.output.dir.empty() ? std::string() : (fs::path(job.output.dir) / "eval").string(),
                     /*append=*/false, tensorboard_dir(job), summary.label_width);
  const checkpoint::CheckpointStore store(dir);
  std::vector<Evaluation> done;
  int64_t last_step = -1;  // newest checkpoint evaluated (or skipped)
  while (true) {
    // Asked before listing: once the training reports its end, its final checkpoint is already complete.
    const std::optional<int64_t> final_step = options.training_done();
    for (const checkpoint::CheckpointEntry& entry : store.entries()) {
      if (entry.step <= last_step || !fs::exists(fs::path(entry.path) / checkpoint::kDoneFile)) continue;
      last_step = entry.step;
      const std::optional<Evaluation> e = evaluate_checkpoint(entry, *strategy, pipeline);
      if (!e) continue;
      done.push_back(*e);
      metrics.evaluation(e->step, e->loss, e->accuracy);
      if (summary.label_width > 1)  // a sequence's labels: per token, with the perplexity
        std::printf("Eval: step %lld: test_loss %.4f, test_perplexity %.4f, test_accuracy %.4f (%s)\n",
                    static_cast<long long>(e->step), e->loss, std::exp(e->loss), e->accuracy, e->checkpoint.c_str());
      else
        std::printf("Eval: step %lld: test_loss %.4f, test_accuracy %.4f (%s)\n", static_cast<long long>(e->step),
                    e->loss, e->accuracy, e->checkpoint.c_str());
      std::fflush(stdout);
    }
    if (final_step && last_step >= *final_step) break;
    if (final_step)
      throw IoError(str("evaluator: the training ended at step ", *final_step, " but ", dir, " holds no complete ",
                        "checkpoint of it (newest: ", last_step, "); is ", dir, " the directory the chief writes?"));
    std::this_thread::sleep_for(std::chrono::duration<double>(options.poll_seconds));
  }
  summary.steps = last_step;
  summary.epochs = job.train.epochs;
  if (!done.empty()) {
    summary.test_loss = done.back().loss;
    summary.test_accuracy = done.back().accuracy;
  }
  summary.evaluations = done;
  summary.wall_seconds = wall.seconds();
  std::printf("Done: %zu checkpoint(s) evaluated; the last (step %lld): test_accuracy %.4f\n", done.size(),
              static_cast<long long>(last_step), summary.test_accuracy);
  if (!options.summary_path.empty()) write_summary(options.summary_path, job, summary, "evaluator");
  return summary;
}

}  // namespace dtrain::trainer
