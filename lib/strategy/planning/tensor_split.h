// Which layers tensor parallelism splits, and how: the pure decision from the
// model spec (tensor_split_plan) that `dtrain validate` prints, the memory
// estimate counts and each task applies (parallel/tensor_parallel.h's
// TensorParallel), with the checks and descriptions that go with it. A planning
// rule: it reads specs and builds layers, never a communicator.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nn/layers.h"
#include "nn/sequence_layers.h"
#include "nn/sequential.h"
#include "strategy/strategy_spec.h"

namespace dtrain::strategy {

// How a layer splits: a Dense by output columns or input rows (nn::DenseSplit),
// a MultiHeadAttention by heads, an embedding by vocabulary (its table's rows:
// nn::VocabularySplit), the output Dense by its classes' columns with its logits
// left split for the vocabulary-parallel loss (vocabulary_loss.h).
enum class TensorCut { kColumns, kRows, kHeads, kVocabulary, kOutputColumns };

// One split layer: its name ("dense_1", "transformer_decoder/self_attention"
// inside a block) and how it splits.
struct SplitLayer {
  std::string name;
  TensorCut cut = TensorCut::kColumns;
};

// The layers of `spec` that split over `parts` tasks, in model order:
//   - a Dense directly followed by another Dense (the first's units a multiple
//     of `parts` and its activation not softmax, neither already in a pair):
//     columns, then rows;
//   - a MultiHeadAttention with a multiple of `parts` heads and no attention
//     dropout: by heads;
//   - inside a TransformerDecoder, its self-attention as above and its
//     feed-forward pair when intermediate_dim is a multiple of `parts`.
//   - an Embedding or TokenAndPositionEmbedding (its token table) with a
//     multiple of `parts` ids: by vocabulary;
//   - with `vocabulary_loss` (vocabulary_parallel_loss(job.loss)), a last layer
//     that is a Dense with a multiple of `parts` units, a linear activation and
//     no pair: by its classes, its logits left split.
// A layer named in `whole` (strategy.tensor_split's "none") stays whole; a Dense
// pair with either of its layers there too, or (with `stage_starts`, a
// pipeline's StageSplit::starts) with its layers in two stages; the pairing goes
// on from the next. Empty when nothing splits.
std::vector<SplitLayer> tensor_split_plan(const nn::ModelSpec& spec, int parts, const std::set<std::string>& whole = {},
                                          bool vocabulary_loss = false, const std::vector<size_t>& stage_starts = {});
// ConfigError for a name in strategy.tensor_split that is no layer of `spec`
// (nor a TransformerDecoder's part), listing the names.
void check_tensor_split_names(const nn::ModelSpec& spec, const StrategySpec& strategy);
// "dense (columns) + dense_1 (rows); dense_2 whole", for logs and `validate`.
std::string describe_tensor_split(const nn::ModelSpec& spec, const std::vector<SplitLayer>& plan);
// Splits the layers of `plan` found in the trees of `layers` (each layer and its
// children) as part `index` of `parts` (nn::Dense::split,
// nn::MultiHeadAttention::split, with `all_reduce`); returns how many it split.
// TensorParallel does it to the model; the memory estimate to each layer it
// builds, as part 0 (its all-reduce is never called there).
size_t split_layers(const std::vector<nn::Layer*>& layers, const std::vector<SplitLayer>& plan, int parts, int index,
                    const std::function<void(Tensor&)>& all_reduce);

// "2 data x 2 tensor: 2 copies of the model, each held by 2 tasks"; with
// pipeline `stages`, "1 data x 2 pipeline x 2 tensor: ... each stage held by 2 tasks".
std::string grid_text(int training_tasks, int tensor_parallel, int stages = 1);
// ConfigError (with a fix) for what tensor_parallel does not do yet, and for a
// model with no layer pair to split (within the stages of `stage_starts`).
void check_tensor_parallel(const StrategyJob& job, int training_tasks, const std::vector<size_t>& stage_starts = {});

// Every layer of `layer`'s tree (itself, then its children's), by name.
void collect_layers(nn::Layer& layer, std::map<std::string, nn::Layer*>& out);
// Whether `loss` is a cross-entropy from logits (what the vocabulary split of the
// output layer can compute).
bool vocabulary_parallel_loss(const nn::LossSpec& loss);

}  // namespace dtrain::strategy
