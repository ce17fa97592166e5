// The grid's groups (strategy/parallel/grid_groups.h) made once from the training tasks'
// group: each task's pipeline, data and tensor groups hold the ranks the grid
// names, in its order; a group of every task is the workers themselves, a group
// of one needs no connection, and a maker's groups (the runtime's shared memory)
// take the place of splits for the axes it makes; which axes lie on one machine.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "strategy/parallel/grid_groups.h"
#include "support/rank_threads.h"

using namespace dtrain;
using strategy::GridAxis;

namespace {

// Sums rank + 1 over `group` and checks it equals the sum over `members`.
std::string check_sum(comm::Communicator& group, const std::vector<int>& members, int rank, const char* axis) {
  float value = static_cast<float>(rank + 1);
  group.all_reduce(&value, 1, comm::ReduceOp::kSum);
  float want = 0.0f;
  for (int m : members) want += static_cast<float>(m + 1);
  return value == want ? "" : std::string(axis) + " group of rank " + std::to_string(rank) + " summed " +
                                  std::to_string(value) + ", not " + std::to_string(want);
}

}  // namespace

TEST_CASE("grid groups: 2 data x 2 pipeline x 2 tensor, every group of each task made once, in the grid's order") {
  const strategy::ParallelGrid grid(2, 2, 2);
  auto workers = comm::make_local_group(8, 30.0);
  std::vector<std::string> described(8);
  test::check_all_ok(test::run_on_threads(8, [&](int rank) -> std::string {
    strategy::GridGroups g = strategy::make_grid_groups(*workers[rank], grid);
    described[static_cast<size_t>(rank)] = g.describe();
    for (const GridAxis axis : {GridAxis::kPipeline, GridAxis::kData, GridAxis::kTensor}) {
      const std::vector<int> members = grid.group(axis, rank);
      if (g.of(axis).size() != static_cast<int>(members.size())) return "a group of the wrong size";
      if (std::string e = check_sum(g.of(axis), members, rank, strategy::axis_name(axis)); !e.empty()) return e;
    }
    return "";
  }));
  CHECK(described[5] == "pipeline: split of workers (2 tasks), data: split of workers (2 tasks), "
                        "tensor: split of workers (2 tasks)");
}

TEST_CASE("grid groups: an axis over every task is the workers, one of one task needs no connection, and a maker "
          "replaces the splits of the axes it makes") {
  auto workers = comm::make_local_group(4, 30.0);
  std::vector<std::string> described(4);
  std::vector<int> made(4, 0);
  test::check_all_ok(test::run_on_threads(4, [&](int rank) -> std::string {
    // 4 tensor parts of one copy: the tensor group is every task, the others one task each.
    strategy::GridGroups whole = strategy::make_grid_groups(*workers[rank], strategy::ParallelGrid(1, 1, 4));
    if (rank == 0) described[0] = whole.describe();
    if (std::string e = check_sum(whole.of(GridAxis::kTensor), {0, 1, 2, 3}, rank, "tensor"); !e.empty()) return e;
    // 2 copies x 2 parts, the data groups from a maker (here itself a split, counted), the tensor groups split.
    strategy::GroupMaker maker;
    maker.how = "the maker's";
    maker.make = [&](GridAxis axis, int color, int index, int size) -> std::unique_ptr<comm::Communicator> {
      if (axis != GridAxis::kData || size != 2) return nullptr;
      ++made[static_cast<size_t>(rank)];
      return workers[rank]->split(color, index);
    };
    const strategy::ParallelGrid grid(2, 1, 2);
    strategy::GridGroups g = strategy::make_grid_groups(*workers[rank], grid, maker);
    described[static_cast<size_t>(rank)] += g.describe();
    for (const GridAxis axis : {GridAxis::kData, GridAxis::kTensor})
      if (std::string e = check_sum(g.of(axis), grid.group(axis, rank), rank, strategy::axis_name(axis)); !e.empty())
        return e;
    return "";
  }));
  CHECK(described[0] ==
        "pipeline: one task, data: one task, tensor: workers (4 tasks)"
        "pipeline: one task, data: the maker's (2 tasks), tensor: split of workers (2 tasks)");
  CHECK(made == std::vector<int>{1, 1, 1, 1});
}

TEST_CASE("grid groups: which axes lie on one machine") {
  const strategy::ParallelGrid grid(2, 1, 2);  // ranks 0,1: copy 0's parts; 2,3: copy 1's
  // Two machines holding one copy each: the tensor groups lie on one machine, the data groups do not.
  const std::vector<std::string> by_copy = {"a", "a", "b", "b"};
  CHECK(strategy::axis_on_one_machine(grid, GridAxis::kTensor, by_copy));
  CHECK_FALSE(strategy::axis_on_one_machine(grid, GridAxis::kData, by_copy));
  CHECK(strategy::axis_on_one_machine(grid, GridAxis::kPipeline, by_copy));  // (groups of one)
  // One machine: every axis.
  const std::vector<std::string> one(4, "a");
  for (const GridAxis axis : {GridAxis::kData, GridAxis::kPipeline, GridAxis::kTensor})
    CHECK(strategy::axis_on_one_machine(grid, axis, one));
  // A machine per task: only the groups of one.
  CHECK_FALSE(strategy::axis_on_one_machine(grid, GridAxis::kTensor, {"a", "b", "c", "d"}));
}
