// WorkQueue: how the coordinator (the chief) hands a parameter_server job's data
// to its workers, through the job's rendezvous Store (keys under "ps/work/").
//
// Each epoch is cut into work units of `steps_per_unit` consecutive batches of
// the epoch's shuffled order; unit ids run over all epochs (id = epoch x
// units_per_epoch + index). A free worker takes the next id with an atomic
// ticket (so a slow worker delays nobody) and records itself as its owner; when
// a worker is lost, the coordinator puts the units it owned and had not finished
// back in a requeue list, which workers drain once the tickets run out. The
// pushes a lost worker made stay applied (as in TF). A finished unit records its
// loss and accuracy sums; the coordinator reads them back per epoch. Requeued
// units go before fresh ones, so a lost worker's unit does not hold its epoch
// back until the end of the job.
//
// A worker killed between taking a fresh unit's ticket and recording itself as
// its owner (one store round trip, longer on a loaded machine) leaves that unit
// without an owner. The coordinator's scan at each loss notes such units, and
// requeue_orphans() requeues those still unowned a few seconds later (a live
// worker records itself right after its ticket; one that is slower than that
// trains the unit a second time, which asynchronous training tolerates). A worker
// killed between taking a *requeue* ticket and claiming its unit would still
// leave that unit stranded: not handled.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace dtrain::ps {

struct WorkPlan {
  int64_t epochs = 1;
  int64_t steps_per_epoch = 1;  // batches of one epoch
  int64_t steps_per_unit = 20;
  int64_t units_per_epoch() const { return (steps_per_epoch + steps_per_unit - 1) / steps_per_unit; }
  int64_t total_units() const { return epochs * units_per_epoch(); }
};

struct WorkUnit {
  int64_t id = 0;
  int64_t epoch = 0;
  int64_t first_step = 0, end_step = 0;  // batches [first_step, end_step) of the epoch
};

struct UnitResult {
  double loss_sum = 0.0;
  int64_t correct = 0, count = 0, steps = 0;
  int64_t tokens = 0;  // label positions (= count with one label per sample)
};

class WorkQueue {
 public:
  WorkQueue(rendezvous::Store& store, WorkPlan plan);
  const WorkPlan& plan() const { return plan_; }
  WorkUnit unit(int64_t id) const;

  // Coordinator: opens the queue at unit `first_id` (a resumed job skips the units
  // before it); workers wait for this.
  void open(int64_t first_id);
  // The result of a finished unit, or nullopt. `worker` >= 0: that worker's
  // result (sync mode, where every worker trains every unit on its own shard).
  std::optional<UnitResult> result(int64_t id, int worker = -1);
  // Requeues the unfinished units owned by `owner` ("worker:1#1": task and
  // incarnation) among those handed out so far; returns how many.
  int requeue_units_of(const std::string& owner);
  // Requeues the units noted by requeue_units_of() as handed out but unowned that
  // are still unowned and unfinished `min_age_seconds` later; returns how many.
  // Cheap when there are none (the coordinator calls it on every look).
  int requeue_orphans(double min_age_seconds);
  // Tells the workers that no work is left.
  void close();

  // Worker: the next unit for `owner`, nullopt once the queue is closed. `poll`
  // runs every 200 ms while there is nothing to take (health checks; may throw).
  std::optional<WorkUnit> take(const std::string& owner, const std::function<void()>& poll);
  void complete(const WorkUnit& unit, const UnitResult& result, int worker = -1);
  // The first unit id of the opened queue (waiting for the coordinator, with `poll`).
  int64_t wait_open(const std::function<void()>& poll);

 private:
  rendezvous::Store& store_;
  WorkPlan plan_;
  int64_t first_id_ = -1;
  std::optional<int64_t> slot_;  // worker: a requeue ticket taken whose unit is not requeued yet
  // Coordinator: units handed out without an owner at a loss, and when that was seen.
  std::vector<std::pair<int64_t, std::chrono::steady_clock::time_point>> unowned_;
  void requeue(int64_t id);
};

}  // namespace dtrain::ps
