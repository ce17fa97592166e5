// Elastic membership (strategy.elastic), the runtime's part: when a training
// task is lost, the survivors agree through the job's store on who is left and
// on whose in-memory state they all go on from (trainer/elastic_state.h), then
// the task connects its groups again over the members only (cluster_run.cpp).
//
// The agreement, on every survivor:
//   1. The loss is known: the chief's store counts lost training tasks as the
//      membership's generation (membership/generation); a collective that
//      failed waits (bounded) for the count to grow, else the failure is the
//      job's, as before.
//   2. The members of generation g are the training tasks not named in lost/*.
//      Each posts elastic/g<g>/<task>: its snapshot's position and layout.
//   3. Once every member's is there, the furthest member (the most steps done,
//      then the epoch's end done too; of those the lowest rank) is the source everyone takes the state of. A
//      further loss meanwhile moves everyone to the next generation.
// The chief (rank 0) holds the store and is never lost: its loss fails the job.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "runtime/cluster_task.h"
#include "trainer/elastic_state.h"

namespace dtrain::runtime {

// Who trains now: a membership generation and its training tasks' cluster ranks.
struct Membership {
  int64_t generation = 0;
  std::vector<int> ranks;  // ascending; rank 0 (the chief) is always among them
  // Each member as name#incarnation ("worker:2#2"), by rank: a task that left
  // and came back between two agreements is told apart ("" where unknown).
  std::vector<std::string> ids;
  // >= 0 when the job's training ended (the chief finished, at this step)
  // before the members came to another step's end: nothing is left to train.
  int64_t ended_at_step = -1;
};

// Generation 0: every training task of the cluster, or those the job started
// with (the store's membership/0, when the chief's settle time ran out first).
Membership first_membership(ClusterTask& task);
// Whether this task joins a job that is training already (the membership
// changed before it got here: it was started again after it was lost; or the
// job started without it). It then
// takes the members' state at their next step's end (agree_on_membership with
// no state of its own), instead of starting with them.
bool joins_running_job(ClusterTask& task);
// The running job's members (the store's newest membership) but this task,
// as generation -1: the `before` of a joiner's agree_on_membership.
Membership running_membership(ClusterTask& task);

// After `cause` (a collective's failure, or a newer generation seen at a step's
// end) ended the generation `before`: the next membership the survivors agree
// on, with `elastic` set for it (source rank and point, the change recorded,
// below_minimum when fewer than `min_workers` are left). Rethrows `cause` as
// the job's failure when no training task was lost (ClusterTask::
// rethrow_collective_failure); PeerLost when this task itself was declared lost;
// TimeoutError when a member never posts its position. Once the chief has
// finished training (it never posts again): a joiner (`before.generation` -1),
// or a member whose snapshot is of the final step, gets a Membership with
// ended_at_step set; a member behind it a RuntimeError.
Membership agree_on_membership(ClusterTask& task, trainer::ElasticState& elastic, const Membership& before,
                               const Error& cause, int64_t min_workers, double timeout_seconds);

}  // namespace dtrain::runtime
