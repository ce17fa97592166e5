// Checkpointing for the training loop: periodic saves by the chief (the others
// check that their parameters hash the same), the final step's save at the end of
// a job that saves periodically, and resuming from the newest good checkpoint
// (private to lib/trainer).
//
// What makes a resume exact: initial values, each epoch's shuffle and every
// dropout mask are pure functions of (train.seed, epoch, step), so parameters,
// optimizer state and the position (epoch, steps done in it) are all the state
// there is. Resuming with another number of replicas keeps the global sample
// position: steps done in the epoch are recomputed from samples seen. Under
// train.precision mixed_float16 the dynamic loss scale and its counters are
// state too: the manifest's rng object keeps them ("loss_scale").
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/manifest.h"
#include "comm/communicator.h"
#include "job/job_config.h"
#include "strategy/strategy.h"

namespace dtrain::trainer {

// Where training continues.
struct ResumePoint {
  int64_t global_step = 0;
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  bool resumed = false;
  std::string callbacks_json;  // the Keras callbacks' state saved with it ("" = none)
  // strategy.elastic: the epoch's loss and accuracy sums so far (a re-formed
  // group's epoch record covers the whole epoch); checkpoints do not keep them.
  nn::LossStats epoch_stats = {};
};

class Checkpointer {
 public:
  // workers: the training tasks' group (multi-worker) or nullptr; only its rank 0 writes.
  // final_checkpoint: the end of training saves whatever checkpoint.* say
  // (RunOptions::final_checkpoint: an evaluator task waits for it).
  Checkpointer(const job::JobConfig& job, strategy::Strategy& strategy, comm::Communicator* workers,
               bool final_checkpoint = false);
  ~Checkpointer();

  // Parameter-server jobs: the ps tasks write the tensors, each its own shards
  // (`write` gets the checkpoint's temporary directory and the step, and returns
  // the files' digests), and this task writes the manifest with `layout` last.
  using ShardWriter =
      std::function<std::map<std::string, checkpoint::FileDigest>(const std::string& tmp_dir, int64_t step)>;
  void write_sharded(checkpoint::ShardedLayout layout, ShardWriter write);

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }

  // With checkpoint.resume "auto" (or --resume): loads the newest good checkpoint
  // into the strategy and returns where to continue; otherwise the start.
  ResumePoint resume(int64_t global_batch, int64_t steps_per_epoch);

  // After a step (global_step steps done, step_in_epoch of them in `epoch`) and
  // after an epoch: saves when checkpoint.every_steps / every_epochs say so.
  void after_step(int64_t global_step, int64_t epoch, int64_t step_in_epoch, int64_t global_batch);
  // `last`: training ends after this epoch (its last by count, or early
  // stopping's). A job that saves periodically (checkpoint.every_steps or
  // every_epochs) then saves the final step too, unless that step was just
  // saved, so its newest checkpoint holds the final weights; save_best_only
  // does not (its newest is the best epoch's, as Keras' ModelCheckpoint keeps).
  // `improved`: with checkpoint.save_best_only, whether the monitored figure
  // improved (the epoch's save is skipped when not).
  void after_epoch(int64_t global_step, int64_t epochs_done, int64_t global_batch, bool last = false,
                   bool improved = true);
  // The Keras callbacks' state (a JSON object's text) that the next saves record.
  void set_callbacks_state(std::string json) { callbacks_json_ = std::move(json); }
  // After the global step jumped from `from` to `to` (the parameter-server
  // coordinator polls it): saves once if a multiple of checkpoint.every_steps lies in (from, to].
  void after_steps(int64_t from, int64_t to, int64_t epoch, int64_t step_in_epoch, int64_t global_batch);
  // Saves now (preemption), wherever a checkpoint directory can be derived even if
  // periodic saving is off. Returns the checkpoint's directory, or "" if none.
  std::string save_now(int64_t global_step, int64_t epoch, int64_t step_in_epoch, int64_t global_batch);

 private:
  void save(int64_t global_step, int64_t epoch, int64_t step_in_epoch, int64_t global_batch);
  // A strategy with sharded state (Strategy::sharded_state): every training task
  // writes its part, the chief the manifest; collective over `workers`.
  void save_pieces(checkpoint::Manifest m, nlohmann::json rng, int64_t global_step);

  const job::JobConfig& job_;
  strategy::Strategy& strategy_;
  comm::Communicator* workers_;
  bool writer_ = true;
  bool final_checkpoint_ = false;
  std::string dir_;
  std::string fallback_dir_;  // where a preemption save goes when periodic saving is off
  int64_t last_saved_step_ = -1;
  std::string callbacks_json_;
  checkpoint::ShardedLayout sharded_;  // empty: this task writes the tensors
  ShardWriter shard_writer_;
};

}  // namespace dtrain::trainer
