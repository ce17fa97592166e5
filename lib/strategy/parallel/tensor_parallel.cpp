// Implementation of tensor_parallel.h.
#include "strategy/parallel/tensor_parallel.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "core/timer.h"
#include "strategy/parallel/vocabulary_loss.h"

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

// Every layer of `layer`'s tree (itself, then its children's), by name.
void collect(nn::Layer& layer, std::map<std::string, nn::Layer*>& out) {
  out[layer.name()] = &layer;
  for (nn::Layer* child : layer.children()) collect(*child, out);
}

}  // namespace

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
  for (nn::Layer* layer : layers) collect(*layer, by_name);
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

TensorParallel::TensorParallel(const std::vector<SplitLayer>& plan, nn::Sequential& model, comm::Communicator& group)
    : group_(group) {
  std::vector<nn::Layer*> top;
  for (const auto& layer : model.layers()) top.push_back(layer.get());
  std::map<std::string, nn::Layer*> layers;
  for (nn::Layer* layer : top) collect(*layer, layers);
  for (const SplitLayer& s : plan)
    if (layers.count(s.name)) plan_.push_back(s);  // (a pipeline stage holds only some)
  // What each param's part is: a Dense column part's kernel is a slice of every
  // row, its bias contiguous; a row part's kernel contiguous, its bias whole. By
  // heads: the query/key/value kernels (d, heads, dim) a slice of every row,
  // their biases contiguous, the output kernel contiguous, its bias whole.
  for (const SplitLayer& s : plan_) {
    const auto found = layers.find(s.name);
    if (s.cut == TensorCut::kOutputColumns) classes_ = found->second->output_shape().back();
    for (nn::Param* p : found->second->params()) {
      if (s.cut == TensorCut::kVocabulary) {  // the token table by rows; the positions whole
        if (p->name.find("/position_embedding/") == std::string::npos) cuts_[p->name] = {true, p->value.shape()};
        continue;
      }
      const bool kernel = p->name.size() >= 7 && p->name.compare(p->name.size() - 7, 7, "/kernel") == 0;
      const bool output = p->name.find("/attention_output/") != std::string::npos;
      if (s.cut == TensorCut::kRows && !kernel) continue;
      if (s.cut == TensorCut::kHeads && output && !kernel) continue;
      const bool columns = s.cut == TensorCut::kColumns || s.cut == TensorCut::kOutputColumns;
      const bool slice_of_rows = kernel && (columns || (s.cut == TensorCut::kHeads && !output));
      cuts_[p->name] = {!slice_of_rows, p->value.shape()};
    }
  }
  split_layers(top, plan_, group_.size(), group_.rank(), [this](Tensor& t) {
    const Stopwatch waited;
    group_.all_reduce(t, comm::ReduceOp::kSum);
    comm_seconds_ += waited.seconds();
  });
}

const TensorParallel::Cut* TensorParallel::cut_of(const std::string& name) const {
  for (std::string n = name;;) {
    if (const auto it = cuts_.find(n); it != cuts_.end()) return &it->second;
    const size_t slash = n.rfind('/');
    if (slash == std::string::npos) return nullptr;
    n.resize(slash);
  }
}

std::vector<bool> TensorParallel::norm_counted(const std::vector<nn::Param*>& params) const {
  std::vector<bool> counted;
  for (const nn::Param* p : params) counted.push_back(cut_of(p->name) != nullptr || group_.rank() == 0);
  return counted;
}

void TensorParallel::load(const std::vector<nn::Param*>& into, const Strategy::TensorLookup& lookup,
                          const char* what) const {
  const int64_t parts = group_.size(), index = group_.rank();
  for (nn::Param* p : into) {
    const Cut* cut = cut_of(p->name);
    const Tensor* t = lookup(p->name);
    if (!t) throw ConfigError(str("the checkpoint's ", what, " has no tensor '", p->name, "': it was written for another model or optimizer"));
    const Shape whole = cut ? cut->whole : p->value.shape();
    if (cut && t->shape() == p->value.shape()) {  // this task's own part (restore_best_weights' snapshot)
      p->value.copy_from(*t);
      continue;
    }
    if (t->shape() != whole)
      throw ConfigError(str("the checkpoint's ", what, " tensor '", p->name, "' has shape ", shape_str(t->shape()),
                            " but the model needs ", shape_str(whole)));
    if (!cut) {
      p->value.copy_from(*t);
      continue;
    }
    const Tensor host = t->to_host();
    Tensor part(p->value.shape());
    const int64_t n = part.numel();
    if (cut->contiguous) {
      std::copy_n(host.data() + index * n, n, part.data());
    } else {  // a slice of every row
      const int64_t rows = whole[0], cols = shape_numel(whole) / rows, mine = cols / parts;
      for (int64_t i = 0; i < rows; ++i)
        std::copy_n(host.data() + i * cols + index * mine, mine, part.data() + i * mine);
    }
    p->value.copy_from(part);
  }
}

Tensor TensorParallel::gather(const Tensor& part, const Cut& cut) {
  const Tensor host = part.to_host();
  const int64_t n = host.numel(), parts = group_.size();
  Tensor all({parts * n});
  group_.all_gather(host.data(), static_cast<size_t>(n), all.data());
  if (cut.contiguous) return all.reshaped(cut.whole);
  Tensor whole(cut.whole);
  const int64_t rows = cut.whole[0], cols = shape_numel(cut.whole) / rows, mine = cols / parts;
  for (int64_t r = 0; r < parts; ++r)
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(all.data() + r * n + i * mine, mine, whole.data() + i * cols + r * mine);
  return whole;
}

std::vector<StatePiece> TensorParallel::pieces(const std::vector<nn::Param*>& model,
                                               const std::vector<nn::Param*>& slots) {
  kept_.clear();
  kept_.reserve(model.size() + slots.size());
  std::vector<StatePiece> out;
  const bool chief = group_.rank() == 0;
  const auto add = [&](const nn::Param* p, bool optimizer) {
    const Cut* cut = cut_of(p->name);
    if (cut && cut->contiguous) {
      // Contiguous: this task writes its own part, at its offset in the whole.
      out.push_back({p->name, cut->whole, group_.rank() * p->value.numel(), &p->value, optimizer});
    } else if (cut) {
      kept_.push_back(gather(p->value, *cut));  // every task takes part; the chief writes it
      if (chief) out.push_back({p->name, cut->whole, 0, &kept_.back(), optimizer});
    } else if (chief) {
      out.push_back({p->name, p->value.shape(), 0, &p->value, optimizer});
    }
  };
  for (const nn::Param* p : model) add(p, false);
  for (const nn::Param* p : slots) add(p, true);
  return out;
}

void TensorParallel::whole_hash_input(const std::vector<nn::Param*>& model,
                                      const std::function<void(const void* data, size_t size)>& feed) {
  for (const nn::Param* p : model) {
    const Cut* cut = cut_of(p->name);
    const Tensor whole = cut ? gather(p->value, *cut) : p->value.to_host();
    feed(p->name.data(), p->name.size());
    const std::string shape = shape_str(whole.shape());
    feed(shape.data(), shape.size());
    feed(whole.data(), whole.bytes());
  }
}

std::string TensorParallel::whole_sha256(const std::vector<nn::Param*>& model) {
  Sha256 h;
  whole_hash_input(model, [&h](const void* data, size_t size) { h.update(data, size); });
  return h.hex_digest();
}

}  // namespace dtrain::strategy
