// Implementation of grid_groups.h.
#include "strategy/parallel/grid_groups.h"

#include "comm/local/local_communicator.h"
#include "core/check.h"
#include "core/strings.h"

namespace dtrain::strategy {
namespace {

// The group along `axis` of `workers.rank()`, and how it was made (into `how`).
std::unique_ptr<comm::Communicator> make_group(comm::Communicator& workers, const ParallelGrid& grid, GridAxis axis,
                                               const GroupMaker& maker, std::string& how) {
  const int rank = workers.rank();
  const int size = static_cast<int>(grid.group(axis, rank).size());
  if (size == workers.size() && axis != GridAxis::kPipeline) {  // (a pipeline's sends keep their own group)
    how = "workers";
    return comm::borrow(workers);
  }
  if (size == 1) {
    how = "one task";
    return std::move(comm::make_local_group(1).front());
  }
  const int color = grid.group_color(axis, rank), index = grid.index_in_group(axis, rank);
  if (maker.make)
    if (std::unique_ptr<comm::Communicator> made = maker.make(axis, color, index, size)) {
      how = maker.how;
      return made;
    }
  how = "split of workers";
  return workers.split(color, index);
}

}  // namespace

bool axis_on_one_machine(const ParallelGrid& grid, GridAxis axis, const std::vector<std::string>& host_of_rank) {
  DT_CHECK(static_cast<int>(host_of_rank.size()) == grid.size(), "the grid ", grid.describe(), " over ",
           host_of_rank.size(), " tasks");
  for (int r = 0; r < grid.size(); ++r)
    for (int other : grid.group(axis, r))
      if (host_of_rank[static_cast<size_t>(other)] != host_of_rank[static_cast<size_t>(r)]) return false;
  return true;
}

comm::Communicator& GridGroups::of(GridAxis axis) {
  comm::Communicator* c = axis == GridAxis::kData ? data.get() : axis == GridAxis::kPipeline ? pipeline.get()
                                                                                             : tensor.get();
  DT_CHECK(c, "the grid's ", axis_name(axis), " group was not made");
  return *c;
}

std::string GridGroups::describe() const {
  const auto one = [](const char* axis, const std::unique_ptr<comm::Communicator>& c, const std::string& how) {
    return str(axis, ": ", how, c && c->size() > 1 ? str(" (", c->size(), " tasks)") : "");
  };
  return str(one("pipeline", pipeline, pipeline_how), ", ", one("data", data, data_how), ", ",
             one("tensor", tensor, tensor_how));
}

GridGroups make_grid_groups(comm::Communicator& workers, const ParallelGrid& grid, const GroupMaker& maker) {
  DT_CHECK(grid.size() == workers.size(), "the grid ", grid.describe(), " over ", workers.size(), " tasks");
  GridGroups g;
  g.grid = grid;
  // (one order on every task: the splits are collective over `workers`)
  g.pipeline = make_group(workers, grid, GridAxis::kPipeline, maker, g.pipeline_how);
  g.data = make_group(workers, grid, GridAxis::kData, maker, g.data_how);
  g.tensor = make_group(workers, grid, GridAxis::kTensor, maker, g.tensor_how);
  const GridPlace place = grid.place(workers.rank());
  DT_CHECK(g.pipeline->rank() == place.stage && g.data->rank() == place.copy && g.tensor->rank() == place.part,
           "the grid's groups of rank ", workers.rank(), " are malformed");
  return g;
}

GridGroups& grid_groups(GridGroups* given, comm::Communicator& workers, const ParallelGrid& grid,
                        std::optional<GridGroups>& own) {
  if (given) {
    DT_CHECK(given->grid == grid, "the runtime's grid ", given->grid.describe(), " is not the strategy's ",
             grid.describe());
    return *given;
  }
  own = make_grid_groups(workers, grid);
  return *own;
}

}  // namespace dtrain::strategy
