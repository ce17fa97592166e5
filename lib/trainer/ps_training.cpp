// Implementation of ps_training.h.
//
// Steps are global, as TF's optimizer.iterations: the ps's version, every applied
// update (async and stale: every push; sync: every round). The coordinator polls
// it to log every train.log_every_steps and save every checkpoint.every_steps; a
// step record's loss and accuracy are those of the work units finished since the
// record before. A checkpoint saved mid-epoch records the first unfinished unit
// of the epoch; a resumed job continues from there (units finished out of order
// after it are trained again).
#include "trainer/ps_training.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "ps/work_queue.h"
#include "strategy/parameter_server.h"
#include "trainer/checkpointing.h"
#include "trainer/job_setup.h"
#include "trainer/progress.h"
#include "trainer/records.h"

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

PsSetup setup(const job::JobConfig& job, const RunOptions& options) {
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
  s.threads = setup_threads(job, options.host);
  s.strategy = strategy::make_strategy(job.strategy_job(), {nullptr, s.threads, Device::cpu(), options.ps.group});
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

data::PipelineOptions worker_pipeline(const job::JobConfig& job, const RunOptions& options, int threads) {
  data::PipelineOptions o;
  o.batch_size = job.train.batch_size_per_replica;
  o.shuffle_buffer = job.data.shuffle_buffer;
  o.seed = job.train.seed;
  o.drop_remainder = true;
  o.prefetch = prefetch_batches(job, options.host, threads, 1, Device::cpu());
  o.cache = job.data.cache;
  if (is_sync(job)) {
    o.shard_count = options.ps.num_workers;
    o.shard_index = options.ps.worker_index;
  }
  return o;
}

// A work unit's sums as loss statistics.
nn::LossStats stats_of(const ps::UnitResult& r) { return {r.loss_sum, r.correct, r.count}; }

}  // namespace

RunSummary run_ps_worker(const job::JobConfig& job, const RunOptions& options) {
  Stopwatch wall;
  PsSetup s = setup(job, options);
  RunSummary summary;
  summary.threads = s.threads;
  std::printf("Model: %lld params, strategy parameter_server (worker, %s), %d threads\n",
              static_cast<long long>(s.strategy->model().count_params(false)),
              is_sync(job) ? "sync" : job.strategy.mode == ps::UpdateMode::kStale ? "stale" : "async", s.threads);
  data::Pipeline pipeline(s.train, worker_pipeline(job, options, s.threads));
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
      if (options.stop_requested && options.stop_requested())
        throw Preempted(str("stopped by SIGTERM after ", summary.steps, " steps of this worker (a parameter_server "
                            "worker's work unit goes back to the queue; the job goes on)"));
      s.strategy->train_step({batch}, unit->epoch * s.plan.steps_per_epoch + batch.index, stats);
      ++summary.steps;
      ++result.steps;
      if (options.on_step) options.on_step(summary.steps);
    }
    result.loss_sum = stats.loss_sum;
    result.correct = stats.correct;
    result.count = stats.count;
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
  summary.global_batch_size = s.global_batch;
  summary.train_loss = mean_loss(last);
  summary.train_accuracy = accuracy(last);
  summary.train_samples_per_sec = samples / std::max(seconds, 1e-9);
  const strategy::StepTimings t = s.strategy->timings();
  summary.comm_wait_share = t.step_seconds > 0 ? t.comm_wait_seconds / t.step_seconds : 0.0;
  summary.wall_seconds = wall.seconds();
  std::printf("Done: this worker trained %lld steps in %.1fs, %.0f samples/s (pull wait %.0f%% of its step time)\n",
              static_cast<long long>(summary.steps), summary.wall_seconds, summary.train_samples_per_sec,
              100.0 * summary.comm_wait_share);
  if (!options.summary_path.empty()) write_summary(options.summary_path, job, summary, "parameter_server");
  return summary;
}

RunSummary run_ps_coordinator(const job::JobConfig& job, const RunOptions& options) {
  Stopwatch wall;
  PsSetup s = setup(job, options);
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
    test_pipeline = std::make_unique<data::Pipeline>(load_checked(job.data.test, model), eval_pipeline_options(job, prefetch_batches(job, options.host, s.threads, 1, Device::cpu())));

  rendezvous::Store& store = *options.ps.store;
  ps::WorkQueue queue(store, s.plan);
  Checkpointer checkpointer(job, *s.strategy, nullptr);
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

  MetricsLog metrics(options.write_metrics ? job.output.dir : std::string(), start.resumed,
                     options.write_metrics ? tensorboard_dir(job) : std::string());
  Progress progress(stdout_is_terminal());
  WorkUnitCounts counts;
  int64_t lost_seen = std::max<int64_t>(0, store.add("lost_count", 0));
  int64_t version = start.global_step;
  double train_seconds = 0.0;
  int64_t train_samples = 0;
  for (int64_t epoch = start.epoch; epoch < job.train.epochs; ++epoch) {
    Stopwatch epoch_time, window_time;
    std::set<int64_t> pending;
    for (int64_t id = std::max(first_id, epoch * units); id < (epoch + 1) * units; ++id) pending.insert(id);
    counts.total += static_cast<int64_t>(pending.size());
    nn::LossStats epoch_stats, window_stats;
    bool progressed = true;  // a unit finished in the last look: look again at once
    while (!pending.empty()) {
      if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      progressed = false;
      if (options.on_step) options.on_step(version);  // health and progress through the session
      // Workers lost since the last look: their unfinished units go back to the queue.
      for (const int64_t lost = store.add("lost_count", 0); lost_seen < lost;) {
        const std::string owner = store.get(str("lost/", ++lost_seen)).value_or("");
        if (owner.rfind("worker:", 0) != 0) continue;
        ++counts.workers_lost;
        const int requeued = is_sync(job) ? 0 : queue.requeue_units_of(owner);
        counts.requeued += requeued;
        log::warn("parameter_server: ", owner.substr(0, owner.find('#')), " was lost; ", requeued,
                  " unfinished work unit(s) go back to the queue and the job goes on");
      }
      // Units a lost worker took but did not live to claim (work_queue.h).
      if (const int orphans = queue.requeue_orphans(2.0); orphans > 0) {
        counts.requeued += orphans;
        log::warn("parameter_server: ", orphans, " work unit(s) taken but never claimed by a lost worker go back "
                  "to the queue");
      }
      const int64_t now = options.ps.group->stats().first;
      for (auto it = pending.begin(); it != pending.end();) {
        bool done = false;
        if (is_sync(job)) {
          const ps::WorkUnit u = queue.unit(*it);
          done = now >= u.epoch * s.plan.steps_per_epoch + u.end_step;
          for (int w = 0; done && w < options.ps.num_workers; ++w)
            if (const auto r = queue.result(*it, w)) {
              epoch_stats.add(stats_of(*r));
              window_stats.add(stats_of(*r));
            }
        } else if (const auto r = queue.result(*it)) {
          done = true;
          epoch_stats.add(stats_of(*r));
          window_stats.add(stats_of(*r));
        }
        if (!done) {
          ++it;
          continue;
        }
        ++counts.completed;
        progressed = true;
        it = pending.erase(it);
      }
      const int64_t first_open = pending.empty() ? s.plan.steps_per_epoch : queue.unit(*pending.begin()).first_step;
      const int64_t every = job.train.log_every_steps;
      if (every > 0 && now / every > version / every && window_stats.count > 0) {
        metrics.step(epoch + 1, now, mean_loss(window_stats), accuracy(window_stats),
                     s.strategy->optimizer().learning_rate(now - 1),
                     window_stats.count / std::max(window_time.seconds(), 1e-9));
        window_stats = {};
        window_time.reset();
      }
      checkpointer.after_steps(version, now, epoch, first_open, s.global_batch);
      version = now;
      progress.step(epoch + 1, job.train.epochs, epoch_stats.count / s.global_batch, s.plan.steps_per_epoch,
                    mean_loss(epoch_stats), accuracy(epoch_stats),
                    epoch_stats.count / std::max(epoch_time.seconds(), 1e-9));
    }
    const double seconds = epoch_time.seconds();
    train_seconds += seconds;
    train_samples += epoch_stats.count;
    EpochReport report = epoch_report(epoch + 1, job.train.epochs, s.plan.steps_per_epoch, seconds, epoch_stats);
    s.strategy->sync_state();  // the ps's current values, for evaluation
    version = std::max(version, s.ps->version());
    report.learning_rate = s.strategy->optimizer().learning_rate(std::max<int64_t>(0, version - 1));
    // Saved before evaluating (the save fetches the values again), so a final
    // checkpoint holds the parameters the test figures are of.
    checkpointer.after_epoch(version, epoch + 1, s.global_batch,
                             options.final_checkpoint && epoch + 1 == job.train.epochs);
    if (test_pipeline) {
      const nn::LossStats val = evaluate(*s.strategy, *test_pipeline);
      report.has_validation = true;
      report.val_loss = summary.test_loss = mean_loss(val);
      report.val_accuracy = summary.test_accuracy = accuracy(val);
    }
    progress.epoch_done(report);
    metrics.epoch(report, version);
    summary.train_loss = report.loss;
    summary.train_accuracy = report.accuracy;
  }
  queue.close();
  summary.epochs = job.train.epochs;
  summary.steps = version;
  summary.world_size = options.ps.num_workers;
  summary.global_batch_size = s.global_batch;
  summary.train_samples_per_sec = train_samples / std::max(train_seconds, 1e-9);
  summary.params_sha256 = model.params_sha256();
  summary.work_units = counts;
  summary.wall_seconds = wall.seconds();
  if (summary.test_accuracy >= 0.0)
    std::printf("Test: loss %.4f, accuracy %.4f\n", summary.test_loss, summary.test_accuracy);
  std::printf("Done: %lld steps in %.1fs, %.0f samples/s, %lld of %lld work units completed (%lld requeued, %lld "
              "worker(s) lost), params_sha256 %s\n",
              static_cast<long long>(summary.steps), summary.wall_seconds, summary.train_samples_per_sec,
              static_cast<long long>(counts.completed), static_cast<long long>(counts.total),
              static_cast<long long>(counts.requeued), static_cast<long long>(counts.workers_lost),
              summary.params_sha256.c_str());
  if (!options.summary_path.empty()) write_summary(options.summary_path, job, summary, "parameter_server");
  return summary;
}

}  // namespace dtrain::trainer
