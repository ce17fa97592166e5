// Implementation of tensor_parallel.h.
#include "strategy/parallel/tensor_parallel.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "core/timer.h"

namespace dtrain::strategy {

TensorParallel::TensorParallel(const std::vector<SplitLayer>& plan, nn::Sequential& model, comm::Communicator& group)
    : group_(group) {
  std::vector<nn::Layer*> top;
  for (const auto& layer : model.layers()) top.push_back(layer.get());
  std::map<std::string, nn::Layer*> layers;
  for (nn::Layer* layer : top) collect_layers(*layer, layers);
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
