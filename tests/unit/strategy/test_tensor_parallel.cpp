// strategy.tensor_parallel on threads of this process, its tasks meeting over
// Gloo through an InMemoryStore: Megatron's pairing splits consecutive Dense
// layers (columns, then rows); 2 and 4 tasks, and 2 data-parallel copies of 2,
// follow one_device's per-step loss
// (with gradient accumulation and a dropout layer between the pairs too), end
// with its parameters within float tolerance, and agree on the whole model's
// hash; the checkpoint pieces put together are the whole tensors; whole
// tensors loaded into the parts hash as the whole model that holds them; and
// what it does not do yet is refused with the reason.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/error.h"
#include "core/strings.h"
#include "job/job_config.h"
#include "rendezvous/store.h"
#include "strategy/planning/memory_estimate.h"
#include "strategy/registry.h"
#include "strategy/parallel/tensor_parallel.h"
#include "strategy/parallel/vocabulary_loss.h"
#include "support/gloo_rank.h"
#include "support/rank_threads.h"
#include "support/tiny_dense_job.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

// 6 inputs; dense 8 tanh, dense_1 8 relu, a dropout, dense_2 8 gelu, dense_3 3.
// (Data-parallel copies draw other dropout masks than one_device for their rows:
// a dropout `rate` of 0 for them.)
const char* const kAdam = R"({"type": "adam", "learning_rate": 0.01})";

job::JobConfig mlp_job(const std::string& strategy, int64_t accumulation = 1, const std::string& extra = "",
                       double rate = 0.25, const std::string& optimizer = kAdam) {
  return job::parse_job_config(R"({
    "strategy": )" + strategy + R"(,
    "model": {"input_shape": [6], "layers": [{"type": "Dense", "units": 8, "activation": "tanh"},
                                             {"type": "Dense", "units": 8, "activation": "relu"},
                                             {"type": "Dropout", "rate": )" + std::to_string(rate) + R"(},
                                             {"type": "Dense", "units": 8, "activation": "gelu"},
                                             {"type": "Dense", "units": 3}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": )" + optimizer + R"(,
    "data": {"train": {"format": "synthetic", "shape": [6], "count": 64, "classes": 3}},
    "train": {"batch_size_per_replica": 8, "seed": 7, "gradient_accumulation_steps": )" +
                                   std::to_string(accumulation) + extra + R"(}})",
                               "job.json");
}

constexpr int kSteps = 20;

struct Run {
  std::vector<double> losses;
  std::string hash;
  std::map<std::string, std::vector<float>> whole;  // every model tensor, whole, by name
};

// Step `step`'s 8 rows for copy `copy` of `copies` (its 8 / copies of them), in
// `k` micro-batches.
std::vector<data::Batch> batches_of(int64_t step, int64_t k, int copy = 0, int copies = 1) {
  std::vector<data::Batch> out;
  const int64_t rows = 8 / copies;
  for (int64_t i = 0; i < k; ++i) out.push_back(test::tiny_dense_batch(step, copy * rows + i * rows / k, rows / k));
  return out;
}

Run one_device(int64_t k, double rate, const std::string& optimizer = kAdam) {
  const job::JobConfig job = mlp_job(R"({"type": "one_device"})", k, "", rate, optimizer);
  auto s = strategy::make_strategy(job.strategy_job(), {nullptr, 1});
  Run run;
  for (int64_t step = 0; step < kSteps; ++step) {
    nn::LossStats stats;
    s->train_step(batches_of(step, k), step, stats);
    run.losses.push_back(stats.loss_sum / static_cast<double>(stats.count));
  }
  run.hash = s->params_sha256();
  for (const nn::Param* p : s->model().params())
    run.whole[p->name].assign(p->value.data(), p->value.data() + p->value.numel());
  return run;
}

// `tasks` tasks of tensor_parallel `t` (tasks / t copies), each copy's tasks fed
// the same batches. The model tensors put together from every task's checkpoint
// pieces go into runs[0].whole.
// `split`: the strategy's "tensor_split" object ("" for none).
// `optimizer`: the job's optimizer object.
std::vector<Run> tensor_parallel(int tasks, int t, int64_t k, const std::string& split = "",
                                 const std::string& optimizer = kAdam) {
  rendezvous::InMemoryStore store;
  std::vector<Run> runs(static_cast<size_t>(tasks));
  std::vector<std::vector<std::pair<strategy::StatePiece, std::vector<float>>>> pieces(static_cast<size_t>(tasks));
  test::check_all_ok(test::run_on_threads(tasks, [&](int rank) -> std::string {
    auto workers = test::gloo_rank(store, rank, tasks);
    const int copies = tasks / t, copy = rank / t;
    const job::JobConfig job =
        mlp_job(str(R"({"type": "multi_worker_mirrored", "tensor_parallel": )", t,
                    split.empty() ? std::string() : str(R"(, "tensor_split": )", split), "}"),
                k, "", copies > 1 ? 0.0 : 0.25, optimizer);
    auto s = strategy::make_strategy(job.strategy_job(), {workers.get(), 1});
    CHECK(s->num_replicas_in_sync() == copies);
    CHECK(s->data_shard().count == copies);
    CHECK(s->data_shard().index == copy);
    Run& run = runs[static_cast<size_t>(rank)];
    for (int64_t step = 0; step < kSteps; ++step) {
      nn::LossStats stats;
      s->train_step(batches_of(step, k, copy, copies), step, stats);
      run.losses.push_back(stats.loss_sum / static_cast<double>(stats.count));
    }
    run.hash = s->params_sha256();
    REQUIRE(s->sharded_state());
    for (const strategy::StatePiece& piece : s->state_pieces())
      if (!piece.optimizer)
        pieces[static_cast<size_t>(rank)].push_back(
            {piece, std::vector<float>(piece.value->data(), piece.value->data() + piece.value->numel())});
    return "";
  }));
  for (const auto& of_task : pieces)
    for (const auto& [piece, values] : of_task) {
      std::vector<float>& whole = runs[0].whole[piece.name];
      whole.resize(static_cast<size_t>(shape_numel(piece.whole_shape)));
      std::copy(values.begin(), values.end(), whole.begin() + piece.offset);
    }
  return runs;
}

void check_close(const Run& got, const Run& want) {
  REQUIRE(got.losses.size() == want.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step " << i << ": " << got.losses[i] << " vs " << want.losses[i]);
    CHECK(std::abs(got.losses[i] - want.losses[i]) <= 1e-4 * std::abs(want.losses[i]));
  }
  REQUIRE(got.whole.size() == want.whole.size());
  for (const auto& [name, values] : want.whole) {
    INFO(name);
    REQUIRE(got.whole.count(name) == 1);
    const std::vector<float>& mine = got.whole.at(name);
    REQUIRE(mine.size() == values.size());
    double worst = 0.0;
    for (size_t i = 0; i < values.size(); ++i)
      worst = std::max(worst, std::abs(double(mine[i]) - values[i]) / std::max(1e-3, std::abs(double(values[i]))));
    CHECK(worst <= 1e-4);
  }
}

}  // namespace

TEST_CASE("tensor_parallel: consecutive Dense layers pair up, columns then rows") {
  const job::JobConfig job = mlp_job(R"({"type": "one_device"})");
  const std::vector<strategy::SplitLayer> plan = strategy::tensor_split_plan(job.model, 2);
  REQUIRE(plan.size() == 4);
  CHECK(plan[0].name == "dense");
  CHECK(plan[0].cut == strategy::TensorCut::kColumns);
  CHECK(plan[1].name == "dense_1");
  CHECK(plan[1].cut == strategy::TensorCut::kRows);
  CHECK(plan[2].name == "dense_2");  // (the dropout between the pairs is whole)
  CHECK(plan[3].name == "dense_3");
  CHECK(strategy::describe_tensor_split(job.model, plan) ==
        "dense (columns), dense_1 (rows), dense_2 (columns), dense_3 (rows)");
  // 8 units do not split 3 ways: nothing pairs; with a cross-entropy from logits
  // the output layer splits by its 3 classes.
  CHECK(strategy::tensor_split_plan(job.model, 3).empty());
  const std::vector<strategy::SplitLayer> output = strategy::tensor_split_plan(job.model, 3, {}, true);
  REQUIRE(output.size() == 1);
  CHECK(output[0].name == "dense_3");
  CHECK(output[0].cut == strategy::TensorCut::kOutputColumns);
  // At 2, dense_3 is in a pair (rows): the pairs come first.
  CHECK(strategy::tensor_split_plan(job.model, 2, {}, true).size() == 4);
  // A softmax needs every column: dense 8 softmax -> dense 3 does not pair.
  const job::JobConfig softmax = job::parse_job_config(R"({
    "model": {"input_shape": [6], "layers": [{"type": "Dense", "units": 8, "activation": "softmax"},
                                             {"type": "Dense", "units": 3}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": {"type": "adam"},
    "data": {"train": {"format": "synthetic", "shape": [6], "count": 64, "classes": 3}},
    "train": {"batch_size_per_replica": 8}})",
                                                       "job.json");
  CHECK(strategy::tensor_split_plan(softmax.model, 2).empty());
}

TEST_CASE("tensor_parallel under a pipeline: a Dense pair cut by a stage boundary stays whole") {
  const job::JobConfig job = mlp_job(R"({"type": "one_device"})");  // dense, dense_1, dropout, dense_2, dense_3
  // A stage begins at dense_1: the first pair is cut, dense_1 has no Dense after it.
  CHECK(strategy::describe_tensor_split(job.model, strategy::tensor_split_plan(job.model, 2, {}, false, {0, 1})) ==
        "dense_2 (columns), dense_3 (rows); whole on every task: dense, dense_1");
  // A stage begins at dense_3: the second pair is cut.
  CHECK(strategy::describe_tensor_split(job.model, strategy::tensor_split_plan(job.model, 2, {}, false, {0, 4})) ==
        "dense (columns), dense_1 (rows); whole on every task: dense_2, dense_3");
  // A boundary between the pairs cuts none.
  CHECK(strategy::tensor_split_plan(job.model, 2, {}, false, {0, 3}).size() == 4);
  // Both cut: nothing to split, refused with the reason.
  const job::JobConfig cut = mlp_job(R"({"type": "pipeline", "stages": ["dense_1", "dense_3"], "tensor_parallel": 2})");
  CHECK_THROWS_WITH(strategy::check_tensor_parallel(cut.strategy_job(), 6, {0, 1, 4}),
                    Contains("a Dense pair must lie within one pipeline stage"));
}

TEST_CASE("tensor_parallel: strategy.tensor_split keeps the layers it names whole, and the pairing goes on") {
  const job::JobConfig job = mlp_job(R"({"type": "multi_worker_mirrored", "tensor_parallel": 2,
                                         "tensor_split": {"dense": "none", "dense_3": "auto"}})");
  CHECK(job.strategy.tensor_whole == std::set<std::string>{"dense"});
  // dense kept whole: dense_1 has no Dense after it (a Dropout), so dense_2 + dense_3 pair.
  const std::vector<strategy::SplitLayer> plan = strategy::tensor_split_plan(job.model, 2, job.strategy.tensor_whole);
  CHECK(strategy::describe_tensor_split(job.model, plan) ==
        "dense_2 (columns), dense_3 (rows); whole on every task: dense, dense_1");
  // Trained that way on 2 tasks: one_device's steps.
  check_close(tensor_parallel(2, 2, 1, R"({"dense": "none"})")[0], one_device(1, 0.25));
  // Keeping either layer of every pair whole leaves nothing to split: refused, as a name that is no layer.
  const job::JobConfig none = mlp_job(R"({"type": "multi_worker_mirrored", "tensor_parallel": 2,
                                          "tensor_split": {"dense_1": "none", "dense_3": "none"}})");
  CHECK_THROWS_WITH(strategy::check_tensor_parallel(none.strategy_job(), 2),
                    Contains("that strategy.tensor_split leaves to split"));
  const job::JobConfig typo = mlp_job(R"({"type": "multi_worker_mirrored", "tensor_parallel": 2,
                                          "tensor_split": {"dens": "none"}})");
  CHECK_THROWS_WITH(strategy::check_tensor_parallel(typo.strategy_job(), 2),
                    Contains("no layer 'dens'; its layers: dense, dense_1, dropout, dense_2, dense_3"));
  CHECK_THROWS_WITH(mlp_job(R"({"type": "multi_worker_mirrored", "tensor_parallel": 2, "tensor_split": {"dense": "rows"}})"),
                    Contains("tensor_split.dense"));
  CHECK_THROWS_WITH(mlp_job(R"({"type": "multi_worker_mirrored", "tensor_split": {"dense": "none"}})"),
                    Contains("applies only with tensor_parallel"));
}

TEST_CASE("tensor_parallel: 2 and 4 tasks, and 2 copies of 2, follow one_device step by step and end at its "
          "parameters") {
  const int64_t k = GENERATE(1, 2);
  // (at 3 only the output layer splits, by its 3 classes: the vocabulary-parallel loss)
  const auto [tasks, t] = GENERATE(std::pair{2, 2}, std::pair{4, 4}, std::pair{4, 2}, std::pair{3, 3});
  INFO(tasks << " tasks, tensor_parallel " << t << ", " << k << " accumulation step(s)");
  const Run whole = one_device(k, tasks > t ? 0.0 : 0.25);
  const std::vector<Run> runs = tensor_parallel(tasks, t, k);
  check_close(runs[0], whole);
  for (const Run& r : runs) {
    CHECK(r.losses == runs[0].losses);  // every task has the global batch's loss
    CHECK(r.hash == runs[0].hash);      // and (its copy) the same whole model
  }
}

TEST_CASE("tensor_parallel: clipnorm and global_clipnorm take each split gradient's norm over its parts") {
  // SGD with momentum (Adam would undo a uniform scale); the clip bites every step.
  for (const char* clip : {R"("global_clipnorm": 0.05)", R"("clipnorm": 0.02)"}) {
    INFO(clip);
    const std::string optimizer = str(R"({"type": "sgd", "learning_rate": 0.05, "momentum": 0.9, )", clip, "}");
    check_close(tensor_parallel(2, 2, 1, "", optimizer)[0], one_device(1, 0.25, optimizer));
  }
}

TEST_CASE("tensor_parallel: whole tensors loaded into the parts hash as the whole model") {
  const job::JobConfig one = mlp_job(R"({"type": "one_device"})");
  auto source = strategy::make_strategy(one.strategy_job(), {nullptr, 1});
  nn::LossStats stats;
  source->train_step(batches_of(0, 1), 0, stats);  // the optimizer's slots exist, the values moved
  const auto find = [](const std::vector<nn::Param*>& params) {
    return [params](const std::string& name) -> const Tensor* {
      for (const nn::Param* p : params)
        if (p->name == name) return &p->value;
      return nullptr;
    };
  };
  rendezvous::InMemoryStore store;
  std::vector<std::string> hashes(2);
  test::check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
    auto workers = test::gloo_rank(store, rank, 2);
    const job::JobConfig job = mlp_job(R"({"type": "multi_worker_mirrored", "tensor_parallel": 2})");
    auto s = strategy::make_strategy(job.strategy_job(), {workers.get(), 1});
    s->load_state(find(source->model().params()), find(source->optimizer().state()));
    hashes[static_cast<size_t>(rank)] = s->params_sha256();
    return "";
  }));
  CHECK(hashes[0] == source->params_sha256());
  CHECK(hashes[1] == source->params_sha256());
}

TEST_CASE("tensor_parallel: what it does not do yet is refused with the reason") {
  const auto parse_error = [](const std::string& strategy) {
    try {
      mlp_job(strategy);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK_THAT(parse_error(R"({"type": "mirrored", "tensor_parallel": 2})"),
             Contains("only multi_worker_mirrored and pipeline split layers"));
  CHECK_THAT(parse_error(R"({"type": "multi_worker_mirrored", "tensor_parallel": 2, "shard_optimizer_state": true})"),
             Contains("shard_optimizer_state"));
  CHECK_THAT(parse_error(R"({"type": "multi_worker_mirrored", "tensor_parallel": 2, "elastic": {"min_workers": 1}})"),
             Contains("tensor_parallel"));
  const auto check_error = [](const job::JobConfig& job, int tasks) {
    try {
      strategy::check_tensor_parallel(job.strategy_job(), tasks);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string mwm = R"({"type": "multi_worker_mirrored", "tensor_parallel": 2})";
  CHECK(check_error(mlp_job(mwm), 2) == "(no error)");
  CHECK(check_error(mlp_job(mwm), 4) == "(no error)");  // 2 copies of 2
  CHECK_THAT(check_error(mlp_job(mwm), 3), Contains("use a divisor of 3"));
  CHECK_THAT(check_error(mlp_job(mwm, 1, R"(, "precision": "mixed_bfloat16")"), 2), Contains("float32"));
  // 5 divides neither the 8 units nor the 3 classes.
  CHECK_THAT(check_error(mlp_job(R"({"type": "multi_worker_mirrored", "tensor_parallel": 5})"), 5),
             Contains("nothing to split"));
}

TEST_CASE("tensor_parallel: the memory estimate counts each task's part of the split layers") {
  const job::JobConfig job = mlp_job(R"({"type": "one_device"})");
  strategy::MemoryQuery q;
  q.model = job.model;
  q.optimizer = job.optimizer;
  q.batch_rows = 8;
  const strategy::MemoryEstimate whole = strategy::estimate_memory(q);
  // dense 6x8+8 and dense_2 8x8+8 by columns, dense_1 8x8 and dense_3 8x3 by rows (their biases whole).
  CHECK(whole.param_count == 6 * 8 + 8 + 8 * 8 + 8 + 8 * 8 + 8 + 8 * 3 + 3);
  q.tensor_parallel = 2;
  const strategy::MemoryEstimate split = strategy::estimate_memory(q);
  const int64_t part = (6 * 8 + 8 + 8 * 8 + 8 * 8 + 8 + 8 * 3) / 2 + 8 + 3;
  CHECK(split.param_count == part);
  CHECK(split.optimizer_slots == 2 * 4 * part);  // Adam's m and v
  CHECK(split.activations < whole.activations);  // the split layers' outputs are half as wide
  // What a task of the split model holds, counted from its params.
  rendezvous::InMemoryStore store;
  std::vector<int64_t> held(2);
  test::check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
    auto workers = test::gloo_rank(store, rank, 2);
    const job::JobConfig tp = mlp_job(R"({"type": "multi_worker_mirrored", "tensor_parallel": 2})");
    auto s = strategy::make_strategy(tp.strategy_job(), {workers.get(), 1});
    for (const nn::Param* p : s->model().params()) held[static_cast<size_t>(rank)] += p->value.numel();
    workers->barrier();  // (no task leaves, closing its sockets, while another still connects)
    return "";
  }));
  CHECK(held[0] == part);
  CHECK(held[1] == part);
}

TEST_CASE("the vocabulary-parallel loss gives nn::Loss's losses, hits and gradients from the slices, ties too") {
  // 2 samples x 3 positions of 6 classes; row 3 all zeros (a tie everywhere: the
  // first class is the argmax), row 4 tied between classes 1 and 4 (one in each slice).
  constexpr int64_t kRows = 6, kClasses = 6;
  Tensor logits({2, 3, kClasses});
  for (int64_t i = 0; i < logits.numel(); ++i) logits.data()[i] = std::sin(0.7f * static_cast<float>(i)) * 3.0f;
  for (int64_t j = 0; j < kClasses; ++j) logits.data()[3 * kClasses + j] = 0.0f;
  logits.data()[4 * kClasses + 1] = logits.data()[4 * kClasses + 4] = 5.0f;
  const std::vector<int32_t> label_list = {2, 3, 5, 0, 4, 1};
  const Tensor labels = nn::labels_tensor(label_list, Device::cpu());
  nn::LossSpec spec;
  spec.from_logits = true;
  Tensor want_grad(logits.shape());
  nn::LossRows want;
  nn::make_loss(spec)->compute(logits, labels, &want_grad, 0.5f, want);
  CHECK(want.hit.data()[3] == 1.0f);  // the all-zero row's first class is label 0
  CHECK(want.hit.data()[4] == 0.0f);  // the tie's first class is 1, not the label 4
  auto group = comm::make_local_group(2);
  test::check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
    const int64_t part = kClasses / 2;
    Tensor slice({2, 3, part});
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t j = 0; j < part; ++j) slice.data()[r * part + j] = logits.data()[r * kClasses + rank * part + j];
    strategy::VocabularyParallelLoss loss(*group[static_cast<size_t>(rank)], kClasses);
    Tensor grad(slice.shape());
    nn::LossRows got;
    loss.compute(slice, labels, &grad, 0.5f, got);
    std::string problem;
    for (int64_t r = 0; r < kRows; ++r) {
      if (std::abs(got.loss.data()[r] - want.loss.data()[r]) > 1e-5f * std::max(1.0f, want.loss.data()[r]))
        problem += str(" loss of row ", r, ": ", got.loss.data()[r], " vs ", want.loss.data()[r]);
      if (got.hit.data()[r] != want.hit.data()[r]) problem += str(" hit of row ", r);
      for (int64_t j = 0; j < part; ++j)
        if (std::abs(grad.data()[r * part + j] - want_grad.data()[r * kClasses + rank * part + j]) > 1e-6f)
          problem += str(" gradient of row ", r, " class ", rank * part + j);
    }
    return problem;
  }));
}
