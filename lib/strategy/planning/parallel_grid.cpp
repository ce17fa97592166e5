// Implementation of parallel_grid.h.
#include "strategy/planning/parallel_grid.h"

#include "core/check.h"
#include "core/strings.h"

namespace dtrain::strategy {

ParallelGrid::ParallelGrid(int data, int pipeline, int tensor) : data_(data), pipeline_(pipeline), tensor_(tensor) {
  DT_CHECK(data >= 1 && pipeline >= 1 && tensor >= 1, "a grid of ", data, " x ", pipeline, " x ", tensor);
}

GridPlace ParallelGrid::place(int rank) const {
  DT_CHECK(rank >= 0 && rank < size(), "rank ", rank, " of a grid of ", size());
  const int holder = rank / tensor_;  // (the stage's holder within the copy's pipeline)
  return {holder / pipeline_, holder % pipeline_, rank % tensor_};
}

int ParallelGrid::rank_of(const GridPlace& p) const {
  DT_CHECK(p.copy >= 0 && p.copy < data_ && p.stage >= 0 && p.stage < pipeline_ && p.part >= 0 && p.part < tensor_,
           "copy ", p.copy, ", stage ", p.stage, ", part ", p.part, " outside ", describe());
  return (p.copy * pipeline_ + p.stage) * tensor_ + p.part;
}

std::vector<int> ParallelGrid::group(GridAxis axis, int rank) const {
  GridPlace p = place(rank);
  std::vector<int> ranks;
  const int n = axis == GridAxis::kData ? data_ : axis == GridAxis::kPipeline ? pipeline_ : tensor_;
  for (int i = 0; i < n; ++i) {
    (axis == GridAxis::kData ? p.copy : axis == GridAxis::kPipeline ? p.stage : p.part) = i;
    ranks.push_back(rank_of(p));
  }
  return ranks;
}

int ParallelGrid::group_color(GridAxis axis, int rank) const {
  const GridPlace p = place(rank);
  switch (axis) {
    case GridAxis::kData: return p.stage * tensor_ + p.part;
    case GridAxis::kPipeline: return p.copy * tensor_ + p.part;
    case GridAxis::kTensor: return p.copy * pipeline_ + p.stage;
  }
  return 0;
}

int ParallelGrid::index_in_group(GridAxis axis, int rank) const {
  const GridPlace p = place(rank);
  return axis == GridAxis::kData ? p.copy : axis == GridAxis::kPipeline ? p.stage : p.part;
}

std::string ParallelGrid::describe() const {
  return str(data_, " data x ", pipeline_, " pipeline x ", tensor_, " tensor (", size(), size() == 1 ? " task)" : " tasks)");
}

std::string ParallelGrid::describe_task(int rank) const {
  const GridPlace p = place(rank);
  std::vector<std::string> where, groups;
  const auto list = [](const std::vector<int>& ranks) {
    std::vector<std::string> parts;
    for (const int r : ranks) parts.push_back(std::to_string(r));
    return str("[", join(parts, ", "), "]");
  };
  if (data_ > 1) where.push_back(str("copy ", p.copy));
  if (pipeline_ > 1) where.push_back(str("stage ", p.stage));
  if (tensor_ > 1) where.push_back(str("part ", p.part));
  if (tensor_ > 1) groups.push_back(str("tensor group ", list(group(GridAxis::kTensor, rank))));
  if (pipeline_ > 1) groups.push_back(str("pipeline ", list(group(GridAxis::kPipeline, rank))));
  if (data_ > 1) groups.push_back(str("data group ", list(group(GridAxis::kData, rank))));
  if (where.empty()) return str("rank ", rank, ": the only task");
  return str("rank ", rank, ": ", join(where, ", "), "; ", join(groups, ", "));
}

const char* axis_name(GridAxis axis) {
  switch (axis) {
    case GridAxis::kData: return "data";
    case GridAxis::kPipeline: return "pipeline";
    case GridAxis::kTensor: return "tensor";
  }
  return "?";
}

}  // namespace dtrain::strategy
