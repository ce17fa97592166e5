// Implementation of tensor_split.h.
#include "strategy/planning/tensor_split.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "nn/losses.h"

namespace dtrain::strategy {

namespace {

const char* cut_name(TensorCut cut) {
  switch (cut) {
    case TensorCut::kColumns: return "columns";
    case TensorCut::kRows: return "rows";
    case TensorCut::kHeads: return "heads";
    case TensorCut::kVocabulary: return "vocabulary";
    case TensorCut::kOutputColumns: return "classes, vocabulary-parallel loss";
  }
  return "";
}

}  // namespace

void collect_layers(nn::Layer& layer, std::map<std::string, nn::Layer*>& out) {
  out[layer.name()] = &layer;
  for (nn::Layer* child : layer.children()) collect_layers(*child, out);
}

bool vocabulary_parallel_loss(const nn::LossSpec& loss) {
  return loss.from_logits && nn::loss_type_of(loss).cross_entropy;
}

std::vector<SplitLayer> tensor_split_plan(const nn::ModelSpec& spec, int parts, const std::set<std::string>& whole,
                                          bool vocabulary_loss, const std::vector<size_t>& stage_starts) {
  std::vector<SplitLayer> plan;
  if (parts < 2) return plan;
  const std::vector<nn::LayerInfo> layers = nn::describe_layers(spec);
  const auto kept = [&whole](const std::string& name) { return whole.count(name) > 0; };
  // Whether a stage of the pipeline begins at layer `i` (a pair may not straddle it).
  const auto stage_begins = [&stage_starts](size_t i) {
    return std::find(stage_starts.begin(), stage_starts.end(), i) != stage_starts.end();
  };
  for (size_t i = 0; i < layers.size(); ++i) {
    const nn::LayerSpec& ls = spec.layers[i];
    const nn::LayerKind kind = layers[i].kind;
    const std::string& name = layers[i].name;
    if (kept(name)) continue;
    if ((kind == nn::LayerKind::kEmbedding && ls.options_as<nn::EmbeddingOptions>().input_dim % parts == 0) ||
        (kind == nn::LayerKind::kTokenAndPositionEmbedding &&
         ls.options_as<nn::TokenAndPositionEmbeddingOptions>().vocabulary_size % parts == 0)) {
      plan.push_back({name, TensorCut::kVocabulary});
      continue;
    }
    // The output layer's logits, by the classes, when the loss can take them split.
    if (kind == nn::LayerKind::kDense && i + 1 == layers.size() && vocabulary_loss && layers[i].output_shape.back() % parts == 0 &&
        ls.options_as<nn::DenseOptions>().activation == nn::Activation::kLinear) {
      plan.push_back({name, TensorCut::kOutputColumns});
      continue;
    }
    // (a softmax needs every column: such a layer does not split by columns)
    if (kind == nn::LayerKind::kDense && i + 1 < layers.size() && layers[i + 1].kind == nn::LayerKind::kDense &&
        !kept(layers[i + 1].name) &&
        !stage_begins(i + 1) && layers[i].output_shape.back() % parts == 0 &&
        ls.options_as<nn::DenseOptions>().activation != nn::Activation::kSoftmax) {
      plan.push_back({name, TensorCut::kColumns});
      plan.push_back({layers[i + 1].name, TensorCut::kRows});
      ++i;  // (the second is taken: a layer is in one pair at most)
    } else if (kind == nn::LayerKind::kMultiHeadAttention) {
      const auto& o = ls.options_as<nn::MultiHeadAttentionOptions>();
      if (o.num_heads % parts == 0 && o.dropout == 0.0) plan.push_back({name, TensorCut::kHeads});
    } else if (kind == nn::LayerKind::kTransformerDecoder) {
      const auto& o = ls.options_as<nn::TransformerDecoderOptions>();
      const std::string attention = name + "/self_attention", first = name + "/feedforward_intermediate_dense",
                        second = name + "/feedforward_output_dense";
      if (o.num_heads % parts == 0 && o.dropout == 0.0 && !kept(attention)) plan.push_back({attention, TensorCut::kHeads});
      if (o.intermediate_dim % parts == 0 && !kept(first) && !kept(second)) {
        plan.push_back({first, TensorCut::kColumns});
        plan.push_back({second, TensorCut::kRows});
      }
    }
  }
  return plan;
}

void check_tensor_split_names(const nn::ModelSpec& spec, const StrategySpec& strategy) {
  if (strategy.tensor_whole.empty()) return;
  std::vector<std::string> names;
  for (const nn::LayerInfo& layer : nn::describe_layers(spec)) {
    names.push_back(layer.name);
    if (layer.kind == nn::LayerKind::kTransformerDecoder)
      for (const char* part : {"/self_attention", "/feedforward_intermediate_dense", "/feedforward_output_dense"})
        names.push_back(layer.name + part);
  }
  for (const std::string& name : strategy.tensor_whole)
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw ConfigError(str(strategy.path, ".tensor_split: the model has no layer '", name, "'; its layers: ",
                            join(names, ", ")));
}

std::string describe_tensor_split(const nn::ModelSpec& spec, const std::vector<SplitLayer>& plan) {
  std::vector<std::string> split, whole;
  for (const SplitLayer& s : plan) split.push_back(str(s.name, " (", cut_name(s.cut), ")"));
  for (const nn::LayerInfo& layer : nn::describe_layers(spec))
    if (layer.params > 0 && std::none_of(plan.begin(), plan.end(), [&](const SplitLayer& s) {
          return s.name == layer.name || s.name.rfind(layer.name + "/", 0) == 0;
        }))
      whole.push_back(layer.name);
  return str(join(split, ", "), whole.empty() ? "" : str("; whole on every task: ", join(whole, ", ")));
}

std::string grid_text(int training_tasks, int tensor_parallel, int stages) {
  const int copies = training_tasks / std::max(1, tensor_parallel * stages);
  if (stages > 1) {
    if (copies == 0)
      return str(tensor_parallel, " tasks hold each pipeline stage; the cluster's training tasks make the copies");
    return str(copies, " data x ", stages, " pipeline x ", tensor_parallel, " tensor: ", copies,
               copies == 1 ? " copy" : " copies", " of the model, each stage held by ", tensor_parallel, " tasks");
  }
  if (copies == 0)  // (validate without the cluster)
    return str(tensor_parallel, " tasks hold each copy of the model; the cluster's training tasks make the copies");
  return str(copies, " data x ", tensor_parallel, " tensor: ", copies, copies == 1 ? " copy" : " copies",
             " of the model, each held by ", tensor_parallel, " tasks");
}

void check_tensor_parallel(const StrategyJob& job, int training_tasks, const std::vector<size_t>& stage_starts) {
  const int64_t t = job.strategy.tensor_parallel;
  const std::string where = str(job.strategy.path, ".tensor_parallel: ");
  if (training_tasks % t != 0)
    throw ConfigError(str(where, t, " tasks hold each copy of the model, which does not divide the cluster's ",
                          training_tasks, " training tasks into copies; use a divisor of ", training_tasks));
  if (job.strategy.replicas > 1)
    throw ConfigError(str(where, "takes one replica per task; remove strategy.replicas"));
  if (job.train.precision != config::Precision::kFloat32)
    throw ConfigError(str(where, "computes in float32 only so far; set train.precision to \"float32\""));
  check_tensor_split_names(job.model, job.strategy);
  if (tensor_split_plan(job.model, static_cast<int>(t), job.strategy.tensor_whole, vocabulary_parallel_loss(job.loss),
                        stage_starts)
          .empty())
    throw ConfigError(str(where, "the model has no two consecutive Dense layers whose first has a multiple of ", t,
                          " units, no MultiHeadAttention with a multiple of ", t, " heads and no embedding with a "
                          "multiple of ", t, " ids",
                          job.strategy.tensor_whole.empty() ? "" : " that strategy.tensor_split leaves to split",
                          stage_starts.size() > 1 ? " (a Dense pair must lie within one pipeline stage)" : "",
                          ": nothing to split (Megatron's pairing)"));
}

size_t split_layers(const std::vector<nn::Layer*>& layers, const std::vector<SplitLayer>& plan, int parts, int index,
                    const std::function<void(Tensor&)>& all_reduce) {
  std::map<std::string, nn::Layer*> by_name;
  for (nn::Layer* layer : layers) collect_layers(*layer, by_name);
  size_t split = 0;
  for (const SplitLayer& s : plan) {
    const auto found = by_name.find(s.name);
    if (found == by_name.end()) continue;
    if (s.cut == TensorCut::kHeads) {
      auto* attention = dynamic_cast<nn::MultiHeadAttention*>(found->second);
      DT_CHECK(attention, "tensor_parallel: ", s.name, " is not a MultiHeadAttention layer");
      attention->split(parts, index, all_reduce);
    } else if (s.cut == TensorCut::kVocabulary) {
      const nn::VocabularySplit split{parts, index, all_reduce};
      if (auto* table = dynamic_cast<nn::Embedding*>(found->second)) table->split(split);
      else if (auto* tokens = dynamic_cast<nn::TokenAndPositionEmbedding*>(found->second)) tokens->split(split);
      else DT_CHECK(false, "tensor_parallel: ", s.name, " is not an embedding");
    } else {
      auto* dense = dynamic_cast<nn::Dense*>(found->second);
      DT_CHECK(dense, "tensor_parallel: ", s.name, " is not a Dense layer");
      dense->split({s.cut == TensorCut::kRows ? nn::DenseSplit::Kind::kRow : nn::DenseSplit::Kind::kColumn, parts,
                    index, all_reduce});
    }
    ++split;
  }
  return split;
}

}  // namespace dtrain::strategy
