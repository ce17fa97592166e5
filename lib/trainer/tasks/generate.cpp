// generate_text (generate.h): loads the model and its weights on the CPU,
// feeds the prompt through Sequential::decode, then samples token by token.
#include "trainer/tasks/generate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <vector>

#include "checkpoint/checkpoint_store.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"
#include "core/timer.h"
#include "nn/sequential.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {
namespace {

namespace fs = std::filesystem;

checkpoint::LoadedCheckpoint load_weights(const job::JobConfig& job, const std::string& given) {
  const std::string dir = given.empty() ? checkpoint_dir(job) : given;
  if (dir.empty())
    throw ConfigError("generate: no checkpoint: pass --checkpoint DIR, or set checkpoint.dir or output.dir in the job "
                      "(where its training saved them)");
  checkpoint::require_checkpoint_directory(dir, "generate: ", "; train first (dtrain run)");
  if (fs::exists(fs::path(dir) / checkpoint::kManifestFile)) return checkpoint::CheckpointStore::load(dir);
  const auto latest = checkpoint::CheckpointStore(dir).latest_good();
  if (!latest) throw IoError(str("generate: no good checkpoint in ", dir, "; train first (dtrain run)"));
  return checkpoint::CheckpointStore::load(*latest);
}

// The next token from one position's logits.
int64_t sample(const float* logits, int64_t vocabulary, const GenerateOptions& o, Rng& rng) {
  std::vector<int64_t> order(static_cast<size_t>(vocabulary));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (o.temperature <= 0.0) return order[0];
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, vocabulary) : vocabulary;
  std::vector<double> p(static_cast<size_t>(k));
  double sum = 0.0;
  for (int64_t i = 0; i < k; ++i) sum += (p[i] = std::exp((logits[order[i]] - logits[order[0]]) / o.temperature));
  double u = rng.uniform() * sum;
  for (int64_t i = 0; i < k; ++i) {
    if ((u -= p[i]) <= 0.0) return order[i];
  }
  return order[k - 1];
}

}  // namespace

Generated generate_text(const job::JobConfig& job, const GenerateOptions& o) {
  if (o.max_tokens < 0) throw ConfigError(str("--max-tokens must be >= 0, got ", o.max_tokens));
  if (o.temperature < 0.0 || !std::isfinite(o.temperature))
    throw ConfigError(str("--temperature must be >= 0 (0 = the most likely token), got ", o.temperature));
  if (o.top_k < 0) throw ConfigError(str("--top-k must be >= 0 (0 = all tokens), got ", o.top_k));
  nn::Sequential model(job.model, job.train.seed);
  if (model.input_shape().size() != 1 || model.output_shape().size() != 2)
    throw ConfigError(str("generate: the model maps ", shape_str(model.input_shape()), " to ",
                          shape_str(model.output_shape()), "; a language model maps token ids (time,) to logits "
                          "(time, vocabulary)"));
  const int64_t window = model.input_shape()[0], vocabulary = model.output_shape()[1];
  const checkpoint::LoadedCheckpoint ckpt = load_weights(job, o.checkpoint);
  for (nn::Param* p : model.params()) {
    const Tensor* t = ckpt.model.find(p->name);
    if (!t || t->numel() != p->value.numel())
      throw IoError(str("generate: checkpoint ", ckpt.path, " has no tensor '", p->name, "' of ", p->value.numel(),
                        " values; it was not written by this job's model"));
    p->value.copy_from(t->reshaped(p->value.shape()));
  }
  std::vector<int64_t> tokens;
  for (const unsigned char c : o.prompt) {
    if (c >= vocabulary)
      throw ConfigError(str("generate: the prompt's byte ", static_cast<int>(c), " is outside the model's ", vocabulary,
                            " tokens"));
    tokens.push_back(c);
  }
  if (tokens.empty()) tokens.push_back('\n');  // a start: the corpus' separator
  Generated out;
  out.checkpoint = ckpt.path;
  out.step = ckpt.manifest.step;
  Rng rng(o.seed);
  Stopwatch clock;
  Tensor logits, id({1});
  int64_t position = 0;
  // Decodes tokens[from..] from position `position` on; returns the last logits.
  auto feed = [&](size_t from) {
    for (size_t i = from; i < tokens.size(); ++i) {
      id.data()[0] = static_cast<float>(tokens[i]);
      logits = model.decode(id, position++);
    }
  };
  const size_t prompt_start = tokens.size() > static_cast<size_t>(window) ? tokens.size() - window : 0;
  model.start_decoding(1, window);
  feed(prompt_start);
  for (int64_t n = 0; n < o.max_tokens; ++n) {
    const int64_t next = sample(logits.data(), vocabulary, o, rng);
    out.text.push_back(static_cast<char>(next));
    tokens.push_back(next);
    if (position == window) {  // the window is full: start again from its second half
      position = 0;
      model.start_decoding(1, window);
      feed(tokens.size() - static_cast<size_t>(window / 2));
    } else {
      feed(tokens.size() - 1);
    }
  }
  out.tokens_per_second = static_cast<double>(o.max_tokens) / std::max(clock.seconds(), 1e-9);
  return out;
}

}  // namespace dtrain::trainer
