// Implementation of ps_training.h.
//
// Steps are global, as TF's optimizer.iterations: the ps's version, every applied
// update (async and stale: every push; sync: every round). The coordinator polls
// it to log every train.log_every_steps and save every checkpoint.every_steps; a
// step record's loss and accuracy are those of the work units finished since the
// record before. A checkpoint saved mid-epoch records the first unfinished unit
// of the epoch; a resumed job continues from there (units finished out of order
// after it are trained again).
#include "trainer/tasks/ps_training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "ps/work_queue.h"
#include "strategy/parameter_server.h"
#include "trainer/callback_runner.h"
#include "trainer/checkpointing.h"
#include "trainer/setup/job_setup.h"
#include "trainer/reporting/progress.h"
#include "trainer/reporting/records.h"
#include "trainer/reporting/report.h"
#include "trainer/training_loop.h"

namespace dtrain::trainer {
namespace {

bool is_sync(const job::JobConfig& job) { return job.strategy.mode == ps::UpdateMode::kSync; }

// What both sides agree on: the work units of the job.
struct PsSetup {
  std::unique_ptr<strategy::Strategy> strategy;
  strategy::ParameterServerStrategy* ps = nullptr;
  std::shared_ptr<data::Dataset> train;
  ps::WorkPlan plan;
  int64_t global_batch = 0;  // samples of one global step
  int threads = 1;
};

PsSetup setup(const job::JobConfig& job, const plan::ExecutionPlan& plan, const RunOptions& options) {
  if (!options.ps.group || !options.ps.store)
    throw ConfigError("strategy.type parameter_server needs a cluster with ps tasks (dtrain launch --ps 1)");
  if (job.train.gradient_accumulation_steps > 1)
    throw ConfigError("train.gradient_accumulation_steps: parameter_server pushes every batch's gradients (TF's "
                      "asynchronous training has no accumulation); remove it or use multi_worker_mirrored");
  if (job.train.early_stopping.enabled || job.checkpoint.save_best_only)
    throw ConfigError(str(job.train.early_stopping.enabled ? "train.early_stopping" : "checkpoint.save_best_only",
                          ": parameter_server jobs do not run Keras' epoch callbacks in this version of dtrain; "
                          "remove it or use multi_worker_mirrored"));
  PsSetup s;
  apply_threads(plan);
  s.threads = plan.threads;
  s.strategy = strategy::make_strategy(job.strategy_job(), {nullptr, s.threads, plan.device(), options.ps.group});
  s.ps = static_cast<strategy::ParameterServerStrategy*>(s.strategy.get());
  s.train = load_checked(job.data.train, s.strategy->model());
  const int64_t b = job.train.batch_size_per_replica;
  // async/stale: every update is one worker's batch of the whole epoch's order;
  // sync: a round is one batch of every worker's shard (multi_worker_mirrored's).
  const int64_t shards = is_sync(job) ? options.ps.num_workers : 1;
  int64_t steps = s.train->count / shards / b;
  if (job.train.steps_per_epoch > 0) steps = std::min(steps, job.train.steps_per_epoch);
  if (steps == 0)
    throw ConfigError(str("train.batch_size_per_replica ", b, " is more than the ", s.train->count / shards,
                          " training samples each worker's share of an epoch has; use a smaller batch"));
  s.plan.epochs = job.train.epochs;
  s.plan.steps_per_epoch = steps;
  s.plan.steps_per_unit = std::min(job.strategy.steps_per_unit, steps);
  s.global_batch = b * shards;
  return s;
}

data::PipelineOptions worker_pipeline(const job::JobConfig& job, const RunOptions& options, int64_t prefetch) {
  data::PipelineOptions o;
  o.batch_size = job.train.batch_size_per_replica;
  o.shuffle_buffer = job.data.shuffle_buffer;
  o.seed = job.train.seed;
  o.drop_remainder = true;
  o.prefetch = prefetch;
  o.cache = job.data.cache;
  if (is_sync(job)) {
    o.shard_count = options.ps.num_workers;
    o.shard_index = options.ps.worker_index;
  }
  return o;
}

// A work unit's sums as loss statistics.
nn::LossStats stats_of(const ps::UnitResult& r) { return {r.loss_sum, r.correct, r.count, r.tokens}; }

}  // namespace

RunSummary run_ps_worker(const job::JobConfig& job, const plan::ExecutionPlan& plan, const RunOptions& options) {
  Stopwatch wall;
  PsSetup s = setup(job, plan, options);
  RunSummary summary;
  summary.threads = s.threads;
  summary.label_width = s.train->label_width;
  std::printf("Model: %lld params, strategy parameter_server (worker, %s), %d threads\n",
              static_cast<long long>(s.strategy->model().count_params(false)),
              is_sync(job) ? "sync" : job.strategy.mode == ps::UpdateMode::kStale ? "stale" : "async", s.threads);
  data::Pipeline pipeline(s.train, worker_pipeline(job, options, plan.prefetch));
  ps::WorkQueue queue(*options.ps.store, s.plan);
  const auto health = [&] {
    if (options.on_step) options.on_step(summary.steps);
  };
  bool paused = false;  // told the ps tasks this worker has no work now (stale: do not wait for it)
  const auto poll = [&] {
    if (!paused && summary.steps > 0) {
      s.ps->drain();
      options.ps.group->bye();
      paused = true;
    }
    health();
  };
  const int64_t first = queue.wait_open(health);
  int64_t next_sync = first;  // sync: every worker trains every unit, in order
  int64_t skip_to = -1;       // sync: a worker that joins late starts at the ps's step
  if (is_sync(job)) {
    const int64_t version = options.ps.group->stats().first;
    const int64_t at = (version / s.plan.steps_per_epoch) * s.plan.units_per_epoch() +
                       (version % s.plan.steps_per_epoch) / s.plan.steps_per_unit;
    if (at > next_sync) {
      next_sync = at;
      skip_to = version % s.plan.steps_per_epoch;
    }
  }
  Stopwatch train_time;
  int64_t samples = 0;
  nn::LossStats last;
  while (true) {
    std::optional<ps::WorkUnit> unit;
    if (is_sync(job)) {
      if (next_sync < s.plan.total_units()) unit = queue.unit(next_sync++);
    } else {
      unit = queue.take(options.ps.owner, poll);
    }
    if (!unit) break;
    paused = false;
    const int64_t begin = std::max(unit->first_step, skip_to);
    skip_to = -1;
    pipeline.start_range(unit->epoch, begin, unit->end_step);
    nn::LossStats stats;
    data::Batch batch;
    ps::UnitResult result;
    while (pipeline.next(batch)) {
      if (const int signal = options.stop_signal ? options.stop_signal() : 0)
        throw Preempted(str(stop_reason(signal), " after ", summary.steps, " steps of this worker (a parameter_server "
                            "worker's work unit goes back to the queue; the job goes on)"),
                        stop_exit_code(signal));
      s.strategy->train_step({batch}, unit->epoch * s.plan.steps_per_epoch + batch.index, stats);
      ++summary.steps;
      ++result.steps;
      if (options.on_step) options.on_step(summary.steps);
    }
    result.loss_sum = stats.loss_sum;
    result.correct = stats.correct;
    result.count = stats.count;
    result.tokens = stats.tokens;
    samples += stats.count;
    last = stats;
    // A unit is complete once its last push is applied: when the coordinator has
    // every unit of the last epoch, the ps tasks hold their final values (its
    // final checkpoint, which the ps tasks write, and its evaluation agree).
    s.ps->drain();
    queue.complete(*unit, result, is_sync(job) ? options.ps.worker_index : -1);
  }
  if (!paused) {
    s.ps->drain();
    options.ps.group->bye();
  }
  const double seconds = train_time.seconds();
  summary.epochs = job.train.epochs;
  summary.world_size = options.ps.num_workers;  // the job's training workers, as the coordinator says
  summary.global_batch_size = s.global_batch;
  summary.train_loss = mean_loss(last);
  summary.train_accuracy = accuracy(last);
  summary.train_samples_per_sec = samples / std::max(seconds, 1e-9);
  const strategy::StepTimings t = s.strategy->timings();
  summary.comm_wait_share = t.step_seconds > 0 ? t.comm_wait_seconds / t.step_seconds : 0.0;
  summary.wall_seconds = wall.seconds();
  const std::string tokens =
      summary.label_width > 1
          ? str(", ", std::llround(summary.train_samples_per_sec * static_cast<double>(summary.label_width)),
                " tokens/s")
          : std::string();
  std::printf("Done: this worker trained %lld steps in %.1fs, %.0f samples/s%s (pull wait %.0f%% of its step time)\n",
              static_cast<long long>(summary.steps), summary.wall_seconds, summary.train_samples_per_sec,
              tokens.c_str(), 100.0 * summary.comm_wait_share);
  if (!options.summary_path.empty()) write_summary(options.summary_path, job, summary, "parameter_server");
  return summary;
}

namespace {

// The coordinator's steps: the work units its workers complete. It trains
// nothing itself; each advance looks at the queue (requeueing the units of lost
// workers) and at the ps tasks' step count, and saves a checkpoint due by it.
class WorkUnitSteps final : public StepSource {
 public:
  WorkUnitSteps(const job::JobConfig& job, PsSetup& s, ps::WorkQueue& queue, Checkpointer& checkpointer,
                const RunOptions& options, int64_t first_id, int64_t global_step)
      : job_(job),
        s_(s),
        queue_(queue),
        checkpointer_(checkpointer),
        options_(options),
        store_(*options.ps.store),
        first_id_(first_id),
        version_(global_step),
        lost_seen_(std::max<int64_t>(0, store_.add("lost_count", 0))) {}

  void start_epoch(int64_t epoch, int64_t) override {  // (a resumed epoch starts at first_id)
    epoch_ = epoch;
    epoch_samples_ = 0;
    progressed_ = true;
    const int64_t units = s_.plan.units_per_epoch();
    for (int64_t id = std::max(first_id_, epoch * units); id < (epoch + 1) * units; ++id) pending_.insert(id);
    counts_.total += static_cast<int64_t>(pending_.size());
  }

  bool advance(Advance& out) override {
    if (pending_.empty()) return false;
    if (!progressed_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    progressed_ = false;
    if (options_.on_step) options_.on_step(version_);  // health and progress through the session
    requeue_lost_units();
    const int64_t now = options_.ps.group->stats().first;
    nn::LossStats stats;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!collect(*it, now, stats)) {
        ++it;
        continue;
      }
      ++counts_.completed;
      progressed_ = true;
      it = pending_.erase(it);
    }
    const int64_t first_open =
        pending_.empty() ? s_.plan.steps_per_epoch : queue_.unit(*pending_.begin()).first_step;
    checkpointer_.after_steps(version_, now, epoch_, first_open, s_.global_batch);
    version_ = now;
    epoch_samples_ += stats.count;
    out.global_step = now;
    out.steps_in_epoch = epoch_samples_ / s_.global_batch;
    out.stats = stats;
    return true;
  }

  int64_t epoch_end_step(int64_t global_step) override {
    version_ = std::max(global_step, s_.ps->version());  // the ps's current values were just fetched
    return version_;
  }
  // Saved before evaluating (the save fetches the values again), so a final
  // checkpoint holds the parameters the test figures are of.
  bool checkpoint_before_evaluation() const override { return true; }
  bool runs_callbacks() const override { return false; }

  const WorkUnitCounts& counts() const { return counts_; }

 private:
  // Workers lost since the last look: their unfinished units go back to the queue;
  // so do units a lost worker took but did not live to claim (work_queue.h).
  void requeue_lost_units() {
    for (const int64_t lost = store_.add("lost_count", 0); lost_seen_ < lost;) {
      const std::string owner = store_.get(str("lost/", ++lost_seen_)).value_or("");
      if (owner.rfind("worker:", 0) != 0) continue;
      ++counts_.workers_lost;
      const std::string task = owner.substr(0, owner.find('#'));
      const auto& workers = options_.ps.workers;
      if (const auto at = std::find(workers.begin(), workers.end(), task); at != workers.end())
        lost_workers_.insert(static_cast<int>(at - workers.begin()));
      const int requeued = is_sync(job_) ? 0 : queue_.requeue_units_of(owner);
      counts_.requeued += requeued;
      log::warn("parameter_server: ", owner.substr(0, owner.find('#')), " was lost; ", requeued,
                " unfinished work unit(s) go back to the queue and the job goes on");
    }
    if (const int orphans = queue_.requeue_orphans(2.0); orphans > 0) {
      counts_.requeued += orphans;
      log::warn("parameter_server: ", orphans, " work unit(s) taken but never claimed by a lost worker go back "
                "to the queue");
    }
  }

  // Whether unit `id` is done (sync: the ps tasks applied its rounds, with `now`
  // steps done, and every worker not lost recorded its result); its workers'
  // sums into `stats` if so. A sync worker records its result after its last
  // push's reply, so the ps's step count passes the unit before the results are
  // all there: counting the unit then dropped the late workers' losses from the
  // step and epoch records.
  bool collect(int64_t id, int64_t now, nn::LossStats& stats) {
    if (is_sync(job_)) {
      const ps::WorkUnit u = queue_.unit(id);
      if (now < u.epoch * s_.plan.steps_per_epoch + u.end_step) return false;
      std::vector<ps::UnitResult> results;
      for (int w = 0; w < options_.ps.num_workers; ++w) {
        if (const auto r = queue_.result(id, w)) results.push_back(*r);
        else if (lost_workers_.count(w) == 0) return false;  // not recorded yet
      }
      for (const ps::UnitResult& r : results) stats.add(stats_of(r));
      return true;
    }
    const auto r = queue_.result(id);
    if (r) stats.add(stats_of(*r));
    return r.has_value();
  }

  const job::JobConfig& job_;
  PsSetup& s_;
  ps::WorkQueue& queue_;
  Checkpointer& checkpointer_;
  const RunOptions& options_;
  rendezvous::Store& store_;
  const int64_t first_id_;
  int64_t version_;
  int64_t lost_seen_;
  int64_t epoch_ = 0, epoch_samples_ = 0;
  std::set<int64_t> pending_;
  std::set<int> lost_workers_;  // sync: worker indices lost (their results may never come)
  bool progressed_ = true;  // a unit finished in the last look: look again at once
  WorkUnitCounts counts_;
};

}  // namespace

RunSummary run_ps_coordinator(const job::JobConfig& job, const plan::ExecutionPlan& plan, const RunOptions& options) {
  // Set-up: the strategy's local copy, the work queue opened where the run resumes.
  Stopwatch wall;
  PsSetup s = setup(job, plan, options);
  RunSummary summary;
  summary.threads = s.threads;
  nn::Sequential& model = s.strategy->model();
  std::printf("Model: %lld params, strategy parameter_server (%s, %d workers, %d ps), coordinator\n%s%s",
              static_cast<long long>(model.count_params(false)),
              is_sync(job) ? "sync" : job.strategy.mode == ps::UpdateMode::kStale ? "stale" : "async",
              options.ps.num_workers, options.ps.group->size(), model.summary().c_str(),
              options.ps.group->placement().describe().c_str());
  std::unique_ptr<data::Pipeline> test_pipeline;
  if (job.data.has_test)
    test_pipeline =
        std::make_unique<data::Pipeline>(load_checked(job.data.test, model), eval_pipeline_options(job, plan.prefetch));
  ps::WorkQueue queue(*options.ps.store, s.plan);
  Checkpointer checkpointer(job, *s.strategy, nullptr, options.final_checkpoint);
  // Each ps writes its own shards into the checkpoint; this task writes the manifest last.
  checkpointer.write_sharded(s.ps->checkpoint_layout(), [&](const std::string& tmp_dir, int64_t step) {
    return options.ps.group->save(tmp_dir, step);
  });
  const ResumePoint start = checkpointer.resume(s.global_batch, s.plan.steps_per_epoch);
  if (start.resumed) s.ps->assign_to_ps(start.global_step);
  const int64_t units = s.plan.units_per_epoch();
  const int64_t first_id = start.epoch * units + start.step_in_epoch / s.plan.steps_per_unit;
  queue.open(first_id);
  std::printf("Work: %lld steps per epoch in %lld work units of %lld steps, global batch %lld\n",
              static_cast<long long>(s.plan.steps_per_epoch), static_cast<long long>(units),
              static_cast<long long>(s.plan.steps_per_unit), static_cast<long long>(s.global_batch));
  summary.label_width = s.train->label_width;
  MetricsLog metrics(options.write_metrics ? job.output.dir : std::string(), start.resumed,
                     options.write_metrics ? tensorboard_dir(job) : std::string(), summary.label_width);
  CallbackRunner callbacks(job, *s.strategy, nullptr);  // (none run: setup() refuses them)

  // The loop, over the work units.
  WorkUnitSteps steps(job, s, queue, checkpointer, options, first_id, start.global_step);
  const LoopContext context{job,     *s.strategy,          checkpointer,   callbacks,
                            metrics, test_pipeline.get(), s.plan.steps_per_epoch, s.global_batch,
                            summary.label_width};
  const LoopResult loop = run_epochs(context, steps, start);
  queue.close();

  // The report.
  const WorkUnitCounts& counts = steps.counts();
  summary.world_size = options.ps.num_workers;
  summary.global_batch_size = s.global_batch;
  summary.work_units = counts;
  report_run(job, options, *s.strategy, loop, wall.seconds(),
             str(", ", counts.completed, " of ", counts.total, " work units completed (", counts.requeued,
                 " requeued, ", counts.workers_lost, " worker(s) lost)"),
             summary);
  return summary;
}

}  // namespace dtrain::trainer
