// ParallelGrid: how a job's training tasks divide into data copies, pipeline
// stages and tensor parts, in one place. The order (Megatron-LM's): the tensor
// part runs fastest, then the stage, then the copy,
//   rank = (copy x stages + stage) x tensor_parts + part,
// so a stage's parts are neighbours and, with one part, consecutive tasks form a
// pipeline. Expert parallelism is 1 until experts exist. Every group a task
// belongs to (its tensor group, its pipeline, its data group: the tasks that
// differ from it along one axis only) and the numbers Communicator::split takes
// for it come from here: no strategy works out the arithmetic itself.
#pragma once

#include <string>
#include <vector>

namespace dtrain::strategy {

enum class GridAxis { kData, kPipeline, kTensor };

// Where one task is in the grid.
struct GridPlace {
  int copy = 0;   // its data copy (of data())
  int stage = 0;  // its pipeline stage (of pipeline())
  int part = 0;   // its part of a split layer (of tensor())
};

class ParallelGrid {
 public:
  ParallelGrid() = default;  // one task: 1 x 1 x 1
  // DT_CHECKs that every degree is >= 1.
  ParallelGrid(int data, int pipeline, int tensor);

  int data() const { return data_; }
  int pipeline() const { return pipeline_; }
  int tensor() const { return tensor_; }
  int expert() const { return 1; }
  int size() const { return data_ * pipeline_ * tensor_; }
  bool operator==(const ParallelGrid& other) const = default;

  GridPlace place(int rank) const;
  int rank_of(const GridPlace& place) const;
  // The ranks of `rank`'s group along `axis` (every task that differs from it
  // only there), in the order of that axis.
  std::vector<int> group(GridAxis axis, int rank) const;
  // For Communicator::split: the number of `rank`'s group along `axis` (the same
  // for every member, different between the groups) and its index in the group.
  int group_color(GridAxis axis, int rank) const;
  int index_in_group(GridAxis axis, int rank) const;

  // "2 data x 2 pipeline x 2 tensor (8 tasks)"
  std::string describe() const;
  // "rank 5: copy 1, stage 0, part 1; tensor group [4, 5], pipeline [5, 7], data group [1, 5]"
  // (the axes of degree 1 left out).
  std::string describe_task(int rank) const;

 private:
  int data_ = 1, pipeline_ = 1, tensor_ = 1;
};

const char* axis_name(GridAxis axis);

}  // namespace dtrain::strategy
