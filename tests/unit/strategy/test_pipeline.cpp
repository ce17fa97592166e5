// The pipeline strategy on threads of this process, its tasks meeting over Gloo
// through an InMemoryStore: 2- and 4-stage pipelines under both schedules give
// one_device's per-step loss on the same batch, end with exactly the parameters
// of one_device with gradient accumulation over the same micro-batches (the same
// sums in the same order), and 2 stages x 2 copies match one_device on both
// copies' batches. Also the stage split's errors and the schedules' order.
#include <catch2/catch.hpp>
#include <set>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/gloo/gloo_communicator.h"
#include "core/error.h"
#include "core/host.h"
#include "core/strings.h"
#include "job/job_config.h"
#include "rendezvous/store.h"
#include "strategy/planning/parallel_grid.h"
#include "strategy/pipeline.h"
#include "strategy/parallel/pipeline_links.h"
#include "strategy/planning/pipeline_profile.h"
#include "strategy/planning/pipeline_stages.h"
#include "strategy/registry.h"
#include "support/gloo_rank.h"
#include "support/rank_threads.h"
#include "support/tiny_dense_job.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

// 6 inputs, four Dense layers (dense .. dense_3), Adam or SGD with momentum.
job::JobConfig deep_job(const std::string& strategy, const std::string& train_extra = "",
                        const std::string& optimizer = R"({"type": "adam", "learning_rate": 0.01})") {
  return job::parse_job_config(R"({
    "strategy": )" + strategy + R"(,
    "model": {"input_shape": [6], "layers": [{"type": "Dense", "units": 8, "activation": "tanh"},
                                             {"type": "Dense", "units": 8, "activation": "relu"},
                                             {"type": "Dense", "units": 8, "activation": "tanh"},
                                             {"type": "Dense", "units": 3}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": )" + optimizer + R"(,
    "data": {"train": {"format": "synthetic", "shape": [6], "count": 64, "classes": 3}},
    "train": {"batch_size_per_replica": 8, "seed": 7)" + train_extra + R"(}})",
                               "job.json");
}

data::Batch batch(int64_t step, int64_t first, int64_t rows) { return test::tiny_dense_batch(step, first, rows); }

constexpr int kSteps = 20;

struct Run {
  std::vector<double> losses;
  std::string hash;
  std::map<std::string, std::vector<float>> params;  // by name
};

// one_device on `rows` rows per step, in `k` accumulation batches of rows / k.
Run one_device(int64_t rows, int64_t k, const std::string& optimizer) {
  const job::JobConfig job = deep_job(R"({"type": "one_device"})", str(", \"gradient_accumulation_steps\": ", k),
                                      optimizer);
  auto s = strategy::make_strategy(job.strategy_job(), {nullptr, 1});
  Run run;
  for (int64_t step = 0; step < kSteps; ++step) {
    std::vector<data::Batch> batches;
    for (int64_t i = 0; i < k; ++i) batches.push_back(batch(step, i * rows / k, rows / k));
    nn::LossStats stats;
    s->train_step(batches, step, stats);
    run.losses.push_back(stats.loss_sum / static_cast<double>(stats.count));
  }
  run.hash = s->params_sha256();
  for (const nn::Param* p : s->model().params())
    run.params[p->name].assign(p->value.data(), p->value.data() + p->value.numel());
  return run;
}

// A pipeline of `tasks` tasks; copy c trains on rows [8c, 8c + 8) of each step's stream.
std::vector<Run> pipeline(int tasks, const std::string& strategy, const std::string& optimizer) {
  rendezvous::InMemoryStore store;
  std::vector<Run> runs(static_cast<size_t>(tasks));
  const auto problems = test::run_on_threads(tasks, [&](int rank) -> std::string {
    comm::GlooOptions o;
    o.rank = rank;
    o.size = tasks;
    o.prefix = "comm/workers/";
    o.timeout_seconds = 30.0;
    auto workers = comm::make_gloo_communicator(store, o);
    const job::JobConfig job = deep_job(strategy, "", optimizer);
    auto s = strategy::make_strategy(job.strategy_job(), {workers.get(), 1});
    Run& run = runs[static_cast<size_t>(rank)];
    const int copy = s->data_shard().index;
    for (int64_t step = 0; step < kSteps; ++step) {
      nn::LossStats stats;
      s->train_step({batch(step, 8 * copy, 8)}, step, stats);
      run.losses.push_back(stats.loss_sum / static_cast<double>(stats.count));
    }
    run.hash = s->params_sha256();
    for (const nn::Param* p : s->model().params())
      run.params[p->name].assign(p->value.data(), p->value.data() + p->value.numel());
    return "";
  });
  test::check_all_ok(problems);
  return runs;
}

void check_losses_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i << ": " << got[i] << " vs " << want[i]);
    CHECK(std::abs(got[i] - want[i]) <= tolerance * std::abs(want[i]));
  }
}

void check_params_close(const Run& stage, const Run& whole, double tolerance) {
  CHECK_FALSE(stage.params.empty());
  for (const auto& [name, values] : stage.params) {
    INFO(name);
    REQUIRE(whole.params.count(name) == 1);
    const std::vector<float>& want = whole.params.at(name);
    REQUIRE(values.size() == want.size());
    double worst = 0.0;
    for (size_t i = 0; i < values.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(values[i]) - want[i]) / std::max(1e-3, std::abs(double(want[i]))));
    CHECK(worst <= tolerance);
  }
}

const char* const kAdam = R"({"type": "adam", "learning_rate": 0.01})";
const char* const kMomentum = R"({"type": "sgd", "learning_rate": 0.05, "momentum": 0.9})";

}  // namespace

TEST_CASE("pipeline: 2 and 4 stages, both schedules, equal one_device step by step") {
  const std::string optimizer = GENERATE(as<std::string>{}, kAdam, kMomentum);
  const Run whole = one_device(8, 1, optimizer);
  const Run accumulated = one_device(8, 4, optimizer);
  struct Case {
    const char* strategy;
    int tasks;
  };
  for (const Case& c : {Case{R"({"type": "pipeline", "stages": ["dense_2"], "schedule": "gpipe"})", 2},
                        Case{R"({"type": "pipeline", "stages": ["dense_2"], "schedule": "1f1b"})", 2},
                        Case{R"({"type": "pipeline", "stages": ["dense_1", "dense_2", "dense_3"], "schedule": "gpipe"})", 4},
                        Case{R"({"type": "pipeline", "stages": "auto", "micro_batches": 4})", 4}}) {
    INFO(c.strategy << " with " << optimizer);
    const std::vector<Run> runs = pipeline(c.tasks, c.strategy, optimizer);
    for (const Run& r : runs) {
      // Every stage reports the loss of the whole batch, one_device's within 1e-4.
      check_losses_close(r.losses, whole.losses, 1e-4);
      // The same sums in the same order as one_device's accumulation of the 4 micro-batches.
      CHECK(r.hash == accumulated.hash);
      check_params_close(r, accumulated, 0.0);
      check_params_close(r, whole, 1e-4);
    }
  }
}

TEST_CASE("pipeline: loss scaling gives one_device's accumulation bit for bit, an inf skips the step on every stage") {
  // Step 2's batch holds an inf (the first stage's gradients become NaN, the
  // last stage's too); both runs skip that step and halve the scale.
  constexpr int64_t kScaledSteps = 6, kPoisoned = 2;
  const auto batch_of = [](int64_t step, int64_t first, int64_t rows) {
    data::Batch b = batch(step, first, rows);
    if (step == kPoisoned && first == 0) b.images.data()[0] = std::numeric_limits<float>::infinity();
    return b;
  };
  struct Trace {
    std::vector<std::string> hashes;
    std::vector<double> scales;
  };
  Trace whole;
  {
    const job::JobConfig job = deep_job(R"({"type": "one_device"})", R"(, "gradient_accumulation_steps": 4)");
    strategy::StrategyContext context{nullptr, 1};
    context.loss_scaling = true;
    auto s = strategy::make_strategy(job.strategy_job(), context);
    for (int64_t step = 0; step < kScaledSteps; ++step) {
      std::vector<data::Batch> batches;
      for (int64_t i = 0; i < 4; ++i) batches.push_back(batch_of(step, 2 * i, 2));
      nn::LossStats stats;
      s->train_step(batches, step, stats);
      whole.hashes.push_back(s->params_sha256());
      whole.scales.push_back(s->loss_scale()->scale());
    }
  }
  rendezvous::InMemoryStore store;
  std::vector<Trace> stages(2);
  test::check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
    auto workers = test::gloo_rank(store, rank, 2);
    const job::JobConfig job = deep_job(R"({"type": "pipeline", "stages": ["dense_2"], "micro_batches": 4})");
    strategy::StrategyContext context{workers.get(), 1};
    context.loss_scaling = true;
    auto s = strategy::make_strategy(job.strategy_job(), context);
    Trace& trace = stages[static_cast<size_t>(rank)];
    for (int64_t step = 0; step < kScaledSteps; ++step) {
      nn::LossStats stats;
      s->train_step({batch_of(step, 0, 8)}, step, stats);
      trace.hashes.push_back(s->params_sha256());
      trace.scales.push_back(s->loss_scale()->scale());
    }
    return "";
  }));
  for (const Trace& t : stages) {
    CHECK(t.hashes == whole.hashes);
    CHECK(t.scales == whole.scales);
  }
  CHECK(whole.hashes[kPoisoned] == whole.hashes[kPoisoned - 1]);  // skipped: nothing changed
  CHECK(whole.scales[kPoisoned] == whole.scales[kPoisoned - 1] / 2);
  CHECK(whole.hashes[kPoisoned + 1] != whole.hashes[kPoisoned]);  // the next step applies
}

TEST_CASE("pipeline: 2 stages x 2 data-parallel copies equal one_device on both copies' batches") {
  const Run whole = one_device(16, 1, kAdam);
  const std::vector<Run> runs =
      pipeline(4, R"({"type": "pipeline", "stages": ["dense_2"], "data_parallel": 2, "micro_batches": 2})", kAdam);
  for (const Run& r : runs) {
    check_losses_close(r.losses, whole.losses, 1e-4);
    check_params_close(r, whole, 1e-4);
  }
  CHECK(runs[0].hash == runs[3].hash);
}

TEST_CASE("pipeline x tensor_parallel: 2 stages x 2 parts, and 2 copies of that, follow one_device step by step") {
  const Run whole = one_device(8, 1, kAdam);
  const Run both = one_device(16, 1, kAdam);
  struct Case {
    const char* strategy;
    int tasks;
    const Run* want;
  };
  // At dense_2 each stage holds one Dense pair (columns, then rows); at dense_1
  // the first pair is cut by the boundary (dense stays whole on its 2 tasks) and
  // the pairing goes on in the second stage (dense_1, dense_2; dense_3 whole).
  for (const Case& c :
       {Case{R"({"type": "pipeline", "stages": ["dense_2"], "tensor_parallel": 2, "schedule": "1f1b"})", 4, &whole},
        Case{R"({"type": "pipeline", "stages": ["dense_1"], "tensor_parallel": 2, "schedule": "gpipe"})", 4, &whole},
        Case{R"({"type": "pipeline", "stages": ["dense_2"], "tensor_parallel": 2, "data_parallel": 2,
                 "micro_batches": 2})", 8, &both}}) {
    INFO(c.strategy);
    const std::vector<Run> runs = pipeline(c.tasks, c.strategy, kAdam);
    for (const Run& r : runs) {
      check_losses_close(r.losses, c.want->losses, 1e-4);
      CHECK(r.hash == runs[0].hash);  // every task: the same whole model
    }
    // A split layer's parts differ between the two tasks of a stage; the stage's
    // first task and its part in the other copy hold the same values.
    CHECK(runs[0].params.at("dense/kernel").size() == (std::string(c.strategy).find("dense_1\"]") == std::string::npos
                                                          ? 6 * 8 / 2 : 6 * 8));
    if (c.tasks == 8) CHECK(runs[0].params == runs[4].params);
  }
}

TEST_CASE("pipeline: clipnorm and global_clipnorm take their norms over the whole model, as one_device does") {
  // SGD with momentum (Adam would undo a uniform scale): a stage clipping by its
  // own gradients' norm alone moves its layers otherwise than one_device.
  for (const char* clip : {R"("global_clipnorm": 0.05)", R"("clipnorm": 0.02)"}) {
    const std::string optimizer = str(R"({"type": "sgd", "learning_rate": 0.05, "momentum": 0.9, )", clip, "}");
    const Run whole = one_device(8, 1, optimizer);
    const Run accumulated = one_device(8, 4, optimizer);
    for (const auto& [strategy, tasks] :
         {std::pair{R"({"type": "pipeline", "stages": ["dense_1", "dense_2", "dense_3"]})", 4},
          std::pair{R"({"type": "pipeline", "stages": ["dense_2"], "tensor_parallel": 2})", 4}}) {
      INFO(strategy << " with " << optimizer);
      const std::vector<Run> runs = pipeline(tasks, strategy, optimizer);
      for (const Run& r : runs) check_losses_close(r.losses, whole.losses, 1e-4);
      if (std::string(strategy).find("tensor") == std::string::npos)
        for (const Run& r : runs) check_params_close(r, accumulated, 1e-5);
    }
  }
}

TEST_CASE("the parallel grid: places, groups and split colors in Megatron's order, tensor innermost") {
  const strategy::ParallelGrid grid(2, 2, 2);  // 2 data x 2 pipeline x 2 tensor
  CHECK(grid.size() == 8);
  CHECK(grid.describe() == "2 data x 2 pipeline x 2 tensor (8 tasks)");
  for (int r = 0; r < 8; ++r) CHECK(grid.rank_of(grid.place(r)) == r);
  using strategy::GridAxis;
  CHECK(grid.group(GridAxis::kTensor, 5) == std::vector<int>{4, 5});
  CHECK(grid.group(GridAxis::kPipeline, 5) == std::vector<int>{5, 7});
  CHECK(grid.group(GridAxis::kData, 5) == std::vector<int>{1, 5});
  CHECK(grid.describe_task(5) == "rank 5: copy 1, stage 0, part 1; tensor group [4, 5], pipeline [5, 7], data group [1, 5]");
  // The members of a group share its color, other groups' differ, and the index is the place along the axis.
  for (const GridAxis axis : {GridAxis::kData, GridAxis::kPipeline, GridAxis::kTensor}) {
    INFO(strategy::axis_name(axis));
    std::set<int> colors;
    for (int r = 0; r < 8; ++r) {
      const std::vector<int> members = grid.group(axis, r);
      for (size_t i = 0; i < members.size(); ++i) {
        CHECK(grid.group_color(axis, members[i]) == grid.group_color(axis, r));
        CHECK(grid.index_in_group(axis, members[i]) == static_cast<int>(i));
      }
      colors.insert(grid.group_color(axis, r));
    }
    CHECK(colors.size() == 4);  // 8 tasks in groups of 2
  }
  CHECK(strategy::ParallelGrid().describe_task(0) == "rank 0: the only task");
  CHECK(strategy::ParallelGrid(4, 1, 1).describe_task(2) == "rank 2: copy 2; data group [0, 1, 2, 3]");
}

TEST_CASE("pipeline x tensor_parallel: the stage's tensor group, the task layout and the task count's error") {
  // rank = (copy x S + stage) x T + part
  const strategy::GridPlace p = strategy::ParallelGrid(2, 2, 2).place(5);
  CHECK(p.part == 1);
  CHECK(p.stage == 0);
  CHECK(p.copy == 1);
  CHECK(strategy::ParallelGrid(3, 2, 1).place(5).stage == 1);  // T = 1: consecutive tasks form one pipeline
  auto spec = [](const std::string& section) { return deep_job(section).strategy; };
  CHECK(strategy::pipeline_stage_count(spec(R"({"type": "pipeline", "stages": "auto", "tensor_parallel": 2})"), 8) == 4);
  CHECK_THROWS_WITH(
      strategy::pipeline_stage_count(spec(R"({"type": "pipeline", "stages": ["dense_2"], "tensor_parallel": 2})"), 2),
      Contains("x 2 tensor_parallel need a multiple of 4 training tasks") && Contains("launch --workers 4"));
  CHECK_THROWS_WITH(deep_job(R"({"type": "central_storage", "tensor_parallel": 2})"),
                    Contains("only multi_worker_mirrored and pipeline split layers over tasks"));
}

TEST_CASE("pipeline: the 1f1b schedule keeps at most S - s micro-batches in flight, gpipe keeps all") {
  // Observed through the peak of held inputs on each stage after a step, and in
  // the measured bytes of the step's tensors.
  std::map<std::string, std::vector<strategy::PipelineStats>> stats_of;
  for (const char* schedule : {"1f1b", "gpipe"}) {
    rendezvous::InMemoryStore store;
    std::vector<int64_t> peaks(4);
    std::vector<strategy::PipelineStats>& all = stats_of[schedule];
    all.resize(4);
    test::check_all_ok(test::run_on_threads(4, [&](int rank) -> std::string {
      auto workers = test::gloo_rank(store, rank, 4);
      const job::JobConfig job = deep_job(str(R"({"type": "pipeline", "stages": ["dense_1", "dense_2", "dense_3"], )",
                                              R"("micro_batches": 8, "schedule": ")", schedule, "\"}"));
      auto s = strategy::make_strategy(job.strategy_job(), {workers.get(), 1});
      nn::LossStats stats;
      s->train_step({batch(0, 0, 8)}, 0, stats);
      all[static_cast<size_t>(rank)] = dynamic_cast<strategy::PipelineStrategy&>(*s).pipeline_stats();
      peaks[static_cast<size_t>(rank)] = all[static_cast<size_t>(rank)].peak_inputs_held;
      return "";
    }));
    for (int stage = 0; stage < 4; ++stage) {
      INFO(schedule << " stage " << stage);
      CHECK(peaks[static_cast<size_t>(stage)] == (std::string(schedule) == "gpipe" ? 8 : 4 - stage));
    }
  }
  for (size_t stage = 1; stage < 4; ++stage) {
    // A later stage's inputs are received tensors of its own, so the measured
    // bytes hold them, and gpipe's extra inputs make its peak higher. (Not by
    // exactly their bytes: on a loaded machine 1f1b's peak also holds a
    // micro-batch's tensors received early, which no count of inputs held sees:
    // 704 against gpipe's 832 with 96 and 256 bytes of inputs, once in a full run.)
    const strategy::PipelineStats &gpipe = stats_of["gpipe"][stage], &f1b = stats_of["1f1b"][stage];
    INFO("stage " << stage << ": measured gpipe " << gpipe.peak_activation_bytes << ", 1f1b "
                  << f1b.peak_activation_bytes << "; inputs held " << gpipe.peak_input_bytes << ", "
                  << f1b.peak_input_bytes);
    CHECK(f1b.peak_activation_bytes >= f1b.peak_input_bytes);
    CHECK(gpipe.peak_input_bytes > f1b.peak_input_bytes);
    CHECK(gpipe.peak_activation_bytes > f1b.peak_activation_bytes);
  }
}

TEST_CASE("pipeline: NCCL links only where every stage of a copy has a GPU of its own") {
  CHECK(strategy::stages_on_distinct_gpus({"host-a 0000:3b:00.0", "host-a 0000:5e:00.0"}));
  CHECK(strategy::stages_on_distinct_gpus({"host-a 0000:3b:00.0", "host-b 0000:3b:00.0", "host-a 0000:5e:00.0"}));
  CHECK_FALSE(strategy::stages_on_distinct_gpus({"host-a 0000:3b:00.0", "host-a 0000:3b:00.0"}));  // one GPU, two ranks
  CHECK_FALSE(strategy::stages_on_distinct_gpus({"", "host-a 0000:3b:00.0"}));  // a stage on the CPU
  CHECK_FALSE(strategy::stages_on_distinct_gpus({"host-a 0000:3b:00.0"}));
  CHECK(strategy::device_identity(Device::cpu(), std::nullopt).empty());
}

TEST_CASE("pipeline: NCCL_HOSTID makes a process another host, as NCCL counts hosts") {
  CHECK(strategy::nccl_host_identity(std::nullopt) == host_identity());
  CHECK(strategy::nccl_host_identity("stage-1") == "NCCL_HOSTID=stage-1");
  CHECK(strategy::nccl_host_identity("") == host_identity());  // empty: NCCL's own default again
}

TEST_CASE("pipeline: a CPU job's stages send through Gloo, and say so") {
  rendezvous::InMemoryStore store;
  std::vector<std::string> links(2);
  test::check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
    auto workers = test::gloo_rank(store, rank, 2);
    const job::JobConfig job = deep_job(R"({"type": "pipeline", "stages": ["dense_2"], "micro_batches": 2})");
    // CPU stages have no GPU identity: no NCCL links, and the connector is never called.
    const auto links_made = strategy::connect_nccl_links_if_distinct(
        *workers, 2, Device::cpu(), std::nullopt, [](const std::string&, int) -> std::unique_ptr<comm::Communicator> {
          throw std::runtime_error("the NCCL pair connector was called for a CPU pipeline");
        });
    if (links_made) return "NCCL links were made for CPU stages";
    strategy::StrategyContext context{workers.get(), 1};
    auto s = strategy::make_strategy(job.strategy_job(), context);
    links[static_cast<size_t>(rank)] = dynamic_cast<strategy::PipelineStrategy&>(*s).pipeline_stats().links;
    return "";
  }));
  CHECK(links == std::vector<std::string>{"gloo", "gloo"});
}

TEST_CASE("pipeline: bad stage lists and micro-batch counts are ConfigErrors with the fix") {
  const std::vector<nn::LayerInfo> layers = nn::describe_layers(deep_job(R"({"type": "one_device"})").model);
  auto spec = [](const std::string& section) { return deep_job(section).strategy; };
  CHECK_THROWS_WITH(strategy::named_split(spec(R"({"type": "pipeline", "stages": ["dense_9"]})"), layers),
                    Contains("stages[0]: 'dense_9' is not a layer of the model") && Contains("dense, dense_1"));
  CHECK_THROWS_WITH(strategy::named_split(spec(R"({"type": "pipeline", "stages": ["dense_2", "dense_1"]})"), layers),
                    Contains("stages[1]: 'dense_1' (layer 1) does not come after the previous boundary 'dense_2'"));
  CHECK_THROWS_WITH(strategy::named_split(spec(R"({"type": "pipeline", "stages": ["dense"]})"), layers),
                    Contains("is the model's first layer"));
  CHECK_THROWS_WITH(
      strategy::named_split(spec(R"({"type": "pipeline", "stages": ["dense_1", "dense_2", "dense_3", "x"]})"), layers),
      Contains("5 stages but the model has only 4 layers"));
  CHECK_THROWS_WITH(strategy::pipeline_stage_count(spec(R"({"type": "pipeline", "stages": ["dense_2"]})"), 3),
                    Contains("2 stages") && Contains("need a multiple of 2 training tasks") && Contains("has 3"));
  // data_parallel given: exactly stages x data_parallel tasks.
  CHECK_THROWS_WITH(
      strategy::pipeline_stage_count(spec(R"({"type": "pipeline", "stages": ["dense_2"], "data_parallel": 1})"), 4),
      Contains("x 1 data_parallel copy need 2 training tasks") && Contains("has 4"));
  // Not given: the copies are the rest of the tasks.
  CHECK(strategy::pipeline_copies(spec(R"({"type": "pipeline", "stages": ["dense_2"]})"), 4) == 2);
  CHECK(strategy::pipeline_copies(spec(R"({"type": "pipeline", "stages": ["dense_2"], "tensor_parallel": 2})"), 8) == 2);
  CHECK(strategy::pipeline_copies(spec(R"({"type": "pipeline", "stages": "auto"})"), 4) == 1);
  CHECK_THROWS_WITH(strategy::check_micro_batches(spec(R"({"type": "pipeline", "stages": ["dense_2"], "micro_batches": 3})"), 8),
                    Contains("micro_batches: 3 micro-batches do not divide train.batch_size_per_replica 8"));
  CHECK_THROWS_WITH(deep_job(R"({"type": "pipeline"})"), Contains("stages") && Contains("is required"));
  CHECK_THROWS_WITH(deep_job(R"({"type": "one_device", "micro_batches": 2})"), Contains("only pipeline takes"));
  // Balanced split: the heavy layer stands alone.
  const strategy::StageSplit split = strategy::balanced_split({1, 1, 10, 1, 1}, 3, "test");
  CHECK(split.starts == std::vector<size_t>{0, 2, 3});
}

TEST_CASE("pipeline: auto's profiler times a language model, whose embedding takes only token ids") {
  // The profiler's batch once held uniform floats in [0, 1), which an Embedding
  // refuses ("token id 0.36819 ... is not an integer"): stages "auto" failed for
  // every model that begins with one.
  const job::JobConfig job = job::parse_job_config(R"({
    "strategy": {"type": "pipeline", "stages": "auto"},
    "model": {"input_shape": [8], "layers": [
      {"type": "TokenAndPositionEmbedding", "vocabulary_size": 16, "sequence_length": 8, "embedding_dim": 8},
      {"type": "TransformerDecoder", "intermediate_dim": 16, "num_heads": 2, "normalize_first": true},
      {"type": "Dense", "units": 16}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": "adam",
    "data": {"train": {"format": "synthetic", "shape": [8], "count": 16, "classes": 16}},
    "train": {"batch_size_per_replica": 8}})",
                                                   "job.json");
  std::vector<double> seconds;
  REQUIRE_NOTHROW(seconds = strategy::measure_layer_seconds(job.strategy_job(), 2, 1));
  REQUIRE(seconds.size() == 3);
  for (double s : seconds) CHECK(s > 0.0);
}
