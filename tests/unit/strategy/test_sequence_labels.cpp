// Batches whose samples carry a sequence of labels (a language model's next token
// at each of T positions; the model outputs (T, classes) per sample): mirrored's
// replicas, multi_worker_mirrored's ranks and a pipeline's micro-batches each take
// whole samples with their T labels, and train exactly as one_device on the whole
// batch: the same per-token loss at every step and the same parameters. The loss
// statistics count samples and tokens apart.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/strings.h"
#include "job/job_config.h"
#include "rendezvous/store.h"
#include "strategy/registry.h"
#include "support/gloo_rank.h"
#include "support/rank_threads.h"

using namespace dtrain;

namespace {

constexpr int64_t kPositions = 3, kFeatures = 2, kClasses = 4;
constexpr int kSteps = 8;

// Two 1x1 convolutions over (T, 1, F): a (T, 1, classes) output, one row of logits per position.
job::JobConfig sequence_job(const std::string& strategy) {
  return job::parse_job_config(R"({
    "strategy": )" + strategy + R"(,
    "model": {"input_shape": [3, 1, 2], "layers": [{"type": "Conv2D", "filters": 8, "kernel_size": 1, "activation": "tanh"},
                                                   {"type": "Conv2D", "filters": 4, "kernel_size": 1}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "data": {"train": {"format": "synthetic", "shape": [3, 1, 2], "count": 64, "classes": 4}},
    "train": {"batch_size_per_replica": 4, "seed": 7}})",
                               "job.json");
}

// Samples [first, first + rows) of step `key`'s stream: T positions of F features, T labels each.
data::Batch sequence_batch(int64_t key, int64_t first, int64_t rows) {
  data::Batch b;
  b.images = Tensor({rows, kPositions, 1, kFeatures});
  b.label_width = kPositions;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < kPositions; ++t) {
      for (int64_t f = 0; f < kFeatures; ++f)
        b.images.data()[(r * kPositions + t) * kFeatures + f] =
            u64_to_unit_float(hash_u64(key, first + r, t * 16 + f)) * 2.0f - 1.0f;
      b.labels.push_back(static_cast<int32_t>(hash_u64(key, first + r, 99 + t) % kClasses));
    }
  b.index = key;
  return b;
}

struct Run {
  std::vector<double> losses;  // per token
  std::map<std::string, std::vector<float>> params;
};

void keep_params(strategy::Strategy& s, Run& run) {
  for (const nn::Param* p : s.model().params())
    run.params[p->name].assign(p->value.data(), p->value.data() + p->value.numel());
}

// one_device on 8 samples a step.
Run one_device() {
  const job::JobConfig job = sequence_job(R"({"type": "one_device"})");
  auto s = strategy::make_strategy(job.strategy_job(), {nullptr, 1});
  Run run;
  for (int64_t step = 0; step < kSteps; ++step) {
    nn::LossStats stats;
    s->train_step({sequence_batch(step, 0, 8)}, step, stats);
    CHECK(stats.count == 8);
    CHECK(stats.tokens == 8 * kPositions);
    run.losses.push_back(stats.loss_sum / static_cast<double>(stats.tokens));
  }
  keep_params(*s, run);
  return run;
}

// Every task of a `tasks`-task job (multi_worker_mirrored: rank r takes samples
// [4r, 4r + 4); pipeline: every stage the whole batch).
std::vector<Run> on_threads(int tasks, const std::string& strategy, int64_t rows_per_task) {
  rendezvous::InMemoryStore store;
  std::vector<Run> runs(static_cast<size_t>(tasks));
  const auto problems = test::run_on_threads(tasks, [&](int rank) -> std::string {
    auto workers = test::gloo_rank(store, rank, tasks);
    const job::JobConfig job = sequence_job(strategy);
    auto s = strategy::make_strategy(job.strategy_job(), {workers.get(), 1});
    Run& run = runs[static_cast<size_t>(rank)];
    const int64_t first = rows_per_task == 8 ? 0 : rows_per_task * rank;
    for (int64_t step = 0; step < kSteps; ++step) {
      nn::LossStats stats;
      s->train_step({sequence_batch(step, first, rows_per_task)}, step, stats);
      if (stats.count != 8 || stats.tokens != 8 * kPositions)
        return str("step ", step, ": ", stats.count, " samples and ", stats.tokens, " tokens, not 8 and 24");
      run.losses.push_back(stats.loss_sum / static_cast<double>(stats.tokens));
    }
    keep_params(*s, run);
    return "";
  });
  test::check_all_ok(problems);
  return runs;
}

void check_same(const Run& got, const Run& want, double tolerance) {
  REQUIRE(got.losses.size() == want.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step " << i << ": " << got.losses[i] << " vs " << want.losses[i]);
    CHECK(got.losses[i] == Approx(want.losses[i]).epsilon(tolerance));
  }
  CHECK_FALSE(got.params.empty());
  for (const auto& [name, values] : got.params) {
    INFO(name);
    REQUIRE(want.params.count(name) == 1);
    const std::vector<float>& w = want.params.at(name);
    REQUIRE(values.size() == w.size());
    for (size_t i = 0; i < values.size(); ++i) CHECK(values[i] == Approx(w[i]).epsilon(tolerance).margin(1e-6));
  }
}

}  // namespace

TEST_CASE("sequence labels: a batch split among mirrored replicas keeps each sample's labels with it") {
  const Run reference = one_device();
  CHECK(reference.losses.back() < reference.losses.front());  // it learns
  job::JobConfig job = sequence_job(R"({"type": "mirrored"})");
  job.strategy.replicas = 2;
  auto s = strategy::make_strategy(job.strategy_job(), {nullptr, 2});
  REQUIRE(s->local_replicas() == 2);
  Run mirrored;
  for (int64_t step = 0; step < kSteps; ++step) {
    nn::LossStats stats;
    s->train_step({sequence_batch(step, 0, 8)}, step, stats);  // 4 samples (12 labels) per replica
    CHECK(stats.count == 8);
    CHECK(stats.tokens == 8 * kPositions);
    mirrored.losses.push_back(stats.loss_sum / static_cast<double>(stats.tokens));
  }
  keep_params(*s, mirrored);
  check_same(mirrored, reference, 1e-4);
  nn::LossStats eval;
  s->eval_step(sequence_batch(99, 0, 8), eval);
  CHECK(eval.count == 8);
  CHECK(eval.tokens == 8 * kPositions);
}

TEST_CASE("sequence labels: multi_worker_mirrored's ranks equal one_device on both ranks' samples") {
  const Run reference = one_device();
  const std::vector<Run> ranks = on_threads(2, R"({"type": "multi_worker_mirrored"})", 4);
  for (const Run& r : ranks) check_same(r, reference, 1e-4);
}

TEST_CASE("sequence labels: a pipeline's micro-batches take whole samples with their labels") {
  const Run reference = one_device();
  const std::vector<Run> stages =
      on_threads(2, R"({"type": "pipeline", "stages": ["conv2d_1"], "micro_batches": 4})", 8);
  // Every stage learns the last stage's loss; each holds its own layers' parameters.
  for (const Run& stage : stages) check_same(stage, reference, 1e-4);
}
