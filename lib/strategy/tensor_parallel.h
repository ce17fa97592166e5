// Tensor parallelism (strategy.tensor_parallel: T, Megatron-LM's split) under
// multi_worker_mirrored: the T training tasks hold one copy of the model between
// them. Each pair of consecutive Dense layers splits as Megatron pairs them: the
// first by output columns, the second by input rows (nn::DenseSplit), so the
// pair needs one all-reduce forward (the second's partial products) and one
// backward (the first's input gradient). Every other layer is whole on every
// task and computes the same values there (their inputs are the same), so its
// gradients need no exchange. Every task reads the same batches.
//
// Which layers split is tensor_split_plan()'s pure decision from the model
// spec: what `dtrain validate` prints and what each task applies. Checkpoints
// hold whole tensors (resumable under any other layout): a row part is one
// contiguous piece of the whole kernel, which its task writes; a column part is
// not (a slice of every row), so the tasks gather it and the chief writes it.
// This first step splits Dense pairs only: MultiHeadAttention by heads, the
// embedding and output projection by vocabulary, and data x tensor grids are
// not built yet (tensor_parallel must equal the training tasks).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "nn/layers.h"
#include "nn/sequential.h"
#include "strategy/strategy.h"

namespace dtrain::strategy {

// One split layer: its index in the model's layers and how it splits.
struct SplitLayer {
  size_t layer = 0;
  std::string name;  // the layer's name ("dense_1")
  nn::DenseSplit::Kind kind = nn::DenseSplit::Kind::kColumn;
};

// The Dense pairs of `spec` that split over `parts` tasks: a Dense directly
// followed by another Dense, the first's units a multiple of `parts`, neither
// already in a pair. Empty when none does.
std::vector<SplitLayer> tensor_split_plan(const nn::ModelSpec& spec, int parts);
// "dense (columns) + dense_1 (rows); dense_2 whole", for logs and `validate`.
std::string describe_tensor_split(const nn::ModelSpec& spec, const std::vector<SplitLayer>& plan);
// ConfigError (with a fix) for what tensor_parallel does not do yet, and for a
// model with no layer pair to split.
void check_tensor_parallel(const StrategyJob& job, int training_tasks);

class TensorParallel {
 public:
  // Splits `model`'s layers as tensor_split_plan() says, over `group` (this
  // task's part: its rank). Before the model is placed.
  TensorParallel(const nn::ModelSpec& spec, nn::Sequential& model, comm::Communicator& group);
  const std::vector<SplitLayer>& plan() const { return plan_; }

  // Copies the whole tensors `lookup` finds into `into` (this task's parts of
  // the split ones); ConfigError as load_named().
  void load(const std::vector<nn::Param*>& into, const Strategy::TensorLookup& lookup, const char* what) const;
  // The checkpoint's pieces of `model` and `slots` (whole tensors from the
  // parts). Collective over the group.
  std::vector<StatePiece> pieces(const std::vector<nn::Param*>& model, const std::vector<nn::Param*>& slots);
  // nn::Sequential::params_sha256 of the whole model. Collective over the group.
  std::string whole_sha256(const std::vector<nn::Param*>& model);

 private:
  struct Cut {
    nn::DenseSplit::Kind kind;
    bool kernel = true;  // the kernel, else the bias (of a column split)
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
};

}  // namespace dtrain::strategy
