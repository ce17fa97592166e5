// GridGroups: the communicators of a task's groups in the parallel grid
// (parallel_grid.h), built once, before the strategy, and handed to it
// (StrategyContext::grid): its pipeline (the stages of its copy, which send
// each other activations), its data group (the same place in every copy: the
// gradients' all-reduce) and its tensor group (the parts of its split layers).
// A strategy takes its groups from here and never splits a communicator itself.
//
// make_grid_groups builds them from the training tasks' group `workers`, axis by
// axis in one order (pipeline, data, tensor) so that every task makes the same
// collective calls: a data or tensor group of every task is `workers` itself (borrowed), a group
// of one is a local group of one (no connection), and any other is what the
// caller's maker returns (the runtime: shared memory where every group of that
// axis lies on one machine), else a Communicator::split of `workers`.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "strategy/planning/parallel_grid.h"

namespace dtrain::strategy {

struct GridGroups {
  ParallelGrid grid;
  std::unique_ptr<comm::Communicator> pipeline, data, tensor;
  // How each was made: "workers", "one task", "shared memory", "split of workers".
  std::string pipeline_how, data_how, tensor_how;

  comm::Communicator& of(GridAxis axis);
  // "pipeline: split of workers (2 tasks), data: shared memory (2 tasks), tensor: one task"
  std::string describe() const;
};

// The group along `axis` for a task at `index` of a group of `size` ranks that
// every task of the axis shares the color `color` with; nullptr: split `workers`.
// It must answer alike (a group or nullptr) on every task for one axis: split is
// collective over all of `workers`.
struct GroupMaker {
  std::function<std::unique_ptr<comm::Communicator>(GridAxis axis, int color, int index, int size)> make;
  std::string how;  // what make() builds: "shared memory"
};

// Whether every group along `axis` lies on one machine: `host_of_rank` names
// each rank's machine (equal strings: one machine). The same answer on every task.
bool axis_on_one_machine(const ParallelGrid& grid, GridAxis axis, const std::vector<std::string>& host_of_rank);

// This task's (workers.rank()'s) groups in `grid`, whose size is workers.size().
// Collective over `workers`.
GridGroups make_grid_groups(comm::Communicator& workers, const ParallelGrid& grid, const GroupMaker& maker = {});

// A strategy's groups: the runtime's (`given`, StrategyContext::grid; a DT_CHECK
// that they are of `grid`), or, for a strategy built without them (in-process
// tests, validate's bench on one process), make_grid_groups(workers, grid) kept
// in `own`.
GridGroups& grid_groups(GridGroups* given, comm::Communicator& workers, const ParallelGrid& grid,
                        std::optional<GridGroups>& own);

}  // namespace dtrain::strategy
