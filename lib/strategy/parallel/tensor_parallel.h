// Tensor parallelism (strategy.tensor_parallel: T, Megatron-LM's split) under
// multi_worker_mirrored: each T consecutive training tasks hold one copy of the
// model between them, and the copies are data parallel (DataParallelStrategy). Each pair of consecutive Dense layers splits as Megatron pairs them: the
// first by output columns, the second by input rows (nn::DenseSplit), so the
// pair needs one all-reduce forward (the second's partial products) and one
// backward (the first's input gradient); a MultiHeadAttention splits by heads
// (its query/key/value projections by columns, its output projection by rows:
// the same two all-reduces); a TransformerDecoder block splits both of its
// parts. Every other layer is whole on every task and computes the same values
// there (their inputs are the same), so its gradients need no exchange. Every
// task reads the same batches.
//
// Which layers split is tensor_split_plan()'s pure decision from the model
// spec (planning/tensor_split.h): what `dtrain validate` prints and what each
// task applies. Checkpoints
// hold whole tensors (resumable under any other layout): a row part is one
// contiguous piece of the whole kernel, which its task writes; a column part is
// not (a slice of every row), so the tasks gather it and the chief writes it.
// Under a pipeline (strategy.type "pipeline" with tensor_parallel, pipeline.h)
// each stage's layers split the same way over the stage's T tasks, except a
// Dense pair that a stage boundary cuts (a stage's output must be whole on each
// of its tasks: both layers stay whole). Norm clipping sums each split
// gradient's squares over its parts (clip_split_by_norm). Not built yet:
// attention dropout split with the heads (such a layer stays whole).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "nn/layers.h"
#include "nn/sequence_layers.h"
#include "nn/sequential.h"
#include "strategy/planning/tensor_split.h"
#include "strategy/strategy.h"

namespace dtrain::strategy {

class TensorParallel {
 public:
  // Splits the layers of `plan` (tensor_split_plan's over group.size() parts)
  // that `model` holds (a pipeline stage holds some), over `group` (this task's
  // part: its rank). Before the model is placed.
  TensorParallel(const std::vector<SplitLayer>& plan, nn::Sequential& model, comm::Communicator& group);
  // The layers split in this model.
  const std::vector<SplitLayer>& plan() const { return plan_; }
  // The whole output's classes when the output layer's logits are split
  // (TensorCut::kOutputColumns: the loss must be VocabularyParallelLoss), else 0.
  int64_t split_classes() const { return classes_; }
  // For clip_split_by_norm (shard_pieces.h): whether each param's sum of squares
  // counts on this task (a part: always; a whole tensor: on part 0 only).
  std::vector<bool> norm_counted(const std::vector<nn::Param*>& params) const;
  // Seconds spent in the split layers' all-reduces so far (the step's
  // communication share counts them).
  double comm_seconds() const { return comm_seconds_; }

  // Copies the whole tensors `lookup` finds into `into` (this task's parts of
  // the split ones; a tensor of the part's own shape is taken as the part:
  // restore_best_weights hands back what the task holds); ConfigError as load_named().
  void load(const std::vector<nn::Param*>& into, const Strategy::TensorLookup& lookup, const char* what) const;
  // The checkpoint's pieces of `model` and `slots` (whole tensors from the
  // parts). Collective over the group.
  std::vector<StatePiece> pieces(const std::vector<nn::Param*>& model, const std::vector<nn::Param*>& slots);
  // nn::Sequential::params_sha256 of the whole model. Collective over the group.
  std::string whole_sha256(const std::vector<nn::Param*>& model);
  // What nn::Sequential::hash_input feeds for `model`, each split param whole.
  // Collective over the group.
  void whole_hash_input(const std::vector<nn::Param*>& model,
                        const std::function<void(const void* data, size_t size)>& feed);

 private:
  // A param's part: contiguous (`index` x its size into the whole, row-major),
  // or a slice of every row (the whole viewed as (whole[0], the rest)).
  struct Cut {
    bool contiguous = true;
    Shape whole;
  };
  // The cut of a param or of one of its optimizer slots ("dense/kernel/m"); nullptr: whole.
  const Cut* cut_of(const std::string& name) const;
  // The whole tensor of `part` (the group's parts gathered). Collective.
  Tensor gather(const Tensor& part, const Cut& cut);

  comm::Communicator& group_;
  std::vector<SplitLayer> plan_;
  std::map<std::string, Cut> cuts_;  // by param name
  std::vector<Tensor> kept_;         // pieces()'s gathered tensors, alive until the next call
  double comm_seconds_ = 0.0;
  int64_t classes_ = 0;
};

}  // namespace dtrain::strategy
