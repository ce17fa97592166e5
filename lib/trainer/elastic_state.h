// ElasticState: what a training task of an elastic job (strategy.elastic) keeps
// across re-formations of its group, in memory. After every step it completed
// (and after each epoch's end) it copies the strategy's parameters, optimizer
// state and position into one host buffer: the snapshot. When a worker is lost,
// the survivors agree on who is left and which of them is furthest (the runtime,
// runtime/elastic.h), connect again, and every member takes that one's snapshot
// by a broadcast over the new group: no process restarts, no checkpoint is read,
// at most the step in flight is redone.
//
// The snapshot is of one task's replica 0. Under multi_worker_mirrored every
// task holds the same trainable parameters; non-trainable statistics (batch-norm
// moving averages) are each task's own until an epoch's end averages them, and
// after a re-formation every member holds the source's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/timer.h"
#include "strategy/registry.h"
#include "strategy/strategy.h"
#include "trainer/checkpointing.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {

class ElasticState {
 public:
  // Copies `s`'s parameters and optimizer state (replica 0's) and `point`.
  void capture(strategy::Strategy& s, const ResumePoint& point);
  bool has_snapshot() const { return captured_; }
  const ResumePoint& point() const { return point_; }
  // The snapshot's position and layout as a JSON object's text: what a member
  // posts when the members agree (the furthest one's is the one all take).
  std::string point_json() const;
  // How far a point_json() text is: (steps done, epochs done). Of two members
  // after the same step, one that also finished that epoch's end is further.
  static std::pair<int64_t, int64_t> progress_of(const std::string& point_json);

  // Every member of `workers` takes the snapshot of rank `source`, whose
  // point_json() is `source_point`: its tensors arrive by broadcast (a member
  // with no snapshot of its own, or one a step behind, gets the source's
  // layout from the text) and are loaded into `s`, with the loss scale.
  // Returns where training continues. Collective over `workers`.
  ResumePoint restore(strategy::Strategy& s, comm::Communicator& workers, int source, const std::string& source_point);

  // Set by the runtime for the generation being started:
  int64_t generation = 0;
  int source_rank = -1;      // the member whose snapshot every member takes (-1: none, generation 0)
  std::string source_point;  // its point_json()
  // How this generation's members take the global batch (batch "global"); the
  // job given to run_training has its accumulation and this member's micro-batch.
  strategy::ElasticSplit split;
  std::vector<MembershipChange> changes;  // every change so far, oldest first
  size_t recorded = 0;                    // of them, written to metrics.jsonl
  std::optional<Stopwatch> reforming;     // since the loss was seen, until the first step at the new size
  // Non-empty: fewer than min_workers are left; the generation only saves a
  // checkpoint and stops with this reason.
  std::string below_minimum;
  // Asked after each step's end (its checkpoint saved): true when a newer
  // membership is known (a task came back), which ends this generation.
  std::function<bool()> membership_changed;
  // The job's figures across generations, so that its totals and epoch lines
  // count from its start, not from the last re-formation:
  std::optional<Stopwatch> wall;  // since the first generation began
  bool described = false;         // the model and data lines printed (once)
  double train_seconds = 0.0;     // of the epochs ended so far (the loop's totals go on from them)
  int64_t train_samples = 0;
  int64_t clock_epoch = -1;       // the epoch epoch_clock times (it goes on when a generation continues it)
  Stopwatch epoch_clock;
  // The training and test data, loaded once and used by every generation.
  std::shared_ptr<data::Dataset> train_data, test_data;

 private:
  struct Entry {
    std::string name;
    Shape shape;
    size_t offset = 0;
    bool optimizer = false;
  };
  void lay_out(strategy::Strategy& s);

  bool captured_ = false;
  ResumePoint point_;
  std::optional<optim::LossScaleState> loss_scale_;
  std::vector<Entry> entries_;
  std::vector<float> values_;
};

}  // namespace dtrain::trainer
