// ZeRO stages 1, 2 and 3 (strategy.shard_optimizer_state, strategy.shard
// "gradients" and "parameters") under multi_worker_mirrored, on threads of this
// process. Stage 1: with N = 1, 2, 3 and 4 tasks (the flat parameter
// range of 325 floats divides by none of 2, 3, 4: padded) the sharded run follows
// the unsharded one step by step (losses and final parameters within 1e-5
// relative) with Adam, SGD with momentum, norm clipping, loss scaling and
// gradient accumulation; each task holds exactly its slice of the optimizer
// slots; whole optimizer state loads into a sharded strategy (another N) and
// comes back whole from its checkpoint pieces; what ZeRO does not do is a
// ConfigError. Stages 2 and 3 (at the end): the same trajectory at N = 1..4
// with and without prefetch, over Gloo, with clipping and accumulation; each
// task's slots are of its chunks only; the freed pages are not resident; the
// pieces make the whole model and state, load into another N and resume the
// same; what they do not do is refused.
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/gloo/gloo_communicator.h"
#include "comm/local/local_communicator.h"
#include "core/error.h"
#include "job/job_config.h"
#include "optim/optimizer.h"
#include "rendezvous/store.h"
#include "strategy/data_parallel.h"
#include "strategy/planning/memory_estimate.h"
#include "strategy/registry.h"
#include "support/rank_threads.h"
#include "support/tiny_dense_job.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

// 6 inputs, Dense 16 tanh, Dense 5: trainable tensors of 96, 16, 80 and 5 floats,
// padded in the arena to 128, 64, 128 and 5: a flat range of 325 floats.
job::JobConfig zero_job(bool shard, const std::string& optimizer) {
  job::JobConfig job = job::parse_job_config(R"({
    "strategy": {"type": "multi_worker_mirrored"},
    "model": {"input_shape": [6], "layers": [{"type": "Dense", "units": 16, "activation": "tanh"},
                                             {"type": "Dense", "units": 5}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": )" + optimizer + R"(,
    "data": {"train": {"format": "synthetic", "shape": [6], "count": 64, "classes": 3}},
    "train": {"batch_size_per_replica": 4, "seed": 7}})",
                                             "job.json");
  job.strategy.shard_optimizer_state = shard;
  return job;
}

const char* const kAdam = R"({"type": "adam", "learning_rate": 0.01})";
const char* const kMomentum = R"({"type": "sgd", "learning_rate": 0.1, "momentum": 0.9})";

using Lookup = strategy::Strategy::TensorLookup;
using TensorMap = std::map<std::string, Tensor>;

Lookup lookup_in(const TensorMap& tensors) {
  return [&tensors](const std::string& name) -> const Tensor* {
    const auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  };
}

// The tasks' communicators (and Gloo's store), kept as long as their strategies.
struct Group {
  rendezvous::InMemoryStore store;
  std::vector<std::unique_ptr<comm::Communicator>> comms;
};

// What one task ends a run with.
struct TaskRun {
  std::shared_ptr<Group> group;         // outlives `strategy` (declared first)
  std::vector<double> losses;           // per step, the job's mean loss
  std::map<std::string, std::vector<float>> params;  // the whole model, by name
  int64_t state_bytes = 0;              // Strategy::optimizer_state_bytes()
  std::vector<strategy::StatePiece> pieces;  // state_pieces() (pointing into `strategy`)
  std::unique_ptr<strategy::Strategy> strategy;
};

struct RunOptions {
  int steps = 20;
  int accumulation = 1;
  bool loss_scaling = false;
  bool gloo = false;  // Gloo over an in-memory store, else the in-process group
  const TensorMap* start_model = nullptr;  // load_state before the first step
  const TensorMap* start_optimizer = nullptr;
  int first_step = 0;
};

// `job` on n tasks (threads), task r training on rows 4r..4r+3 of each batch.
std::vector<TaskRun> run(const job::JobConfig& job, int n, const RunOptions& o = {}) {
  std::vector<TaskRun> out(static_cast<size_t>(n));
  auto group = std::make_shared<Group>();
  if (!o.gloo) group->comms = comm::make_local_group(n, 30.0);
  else group->comms.resize(static_cast<size_t>(n));
  for (TaskRun& t : out) t.group = group;
  job::JobConfig j = job;
  j.train.gradient_accumulation_steps = o.accumulation;
  test::check_all_ok(test::run_on_threads(n, [&](int rank) -> std::string {
    if (o.gloo) {
      comm::GlooOptions g;
      g.rank = rank;
      g.size = n;
      g.prefix = "comm/workers/";
      g.timeout_seconds = 30.0;
      group->comms[rank] = comm::make_gloo_communicator(group->store, g);
    }
    strategy::StrategyContext context{group->comms[rank].get(), 1};
    context.loss_scaling = o.loss_scaling;
    TaskRun& t = out[static_cast<size_t>(rank)];
    t.strategy = strategy::make_strategy(j.strategy_job(), context);
    if (o.start_model) t.strategy->load_state(lookup_in(*o.start_model), lookup_in(*o.start_optimizer));
    for (int64_t step = o.first_step; step < o.first_step + o.steps; ++step) {
      std::vector<data::Batch> micro;
      for (int k = 0; k < o.accumulation; ++k)
        micro.push_back(test::tiny_dense_batch(step * o.accumulation + k, 4 * rank, 4));
      nn::LossStats stats;
      t.strategy->train_step(micro, step, stats);
      t.losses.push_back(stats.loss_sum / static_cast<double>(stats.count));
    }
    t.strategy->with_whole_model([&](nn::Sequential& model) {  // (ZeRO-3: gathered for this)
      for (const nn::Param* p : model.params()) {
        std::vector<float>& v = t.params[p->name];
        v.resize(static_cast<size_t>(p->value.numel()));
        p->value.copy_to_host(v.data());
      }
    });
    t.state_bytes = t.strategy->optimizer_state_bytes();
    t.pieces = t.strategy->state_pieces();
    return "";
  }));
  return out;
}

// Every task's losses and parameters equal the reference task's within 1e-5 relative.
void check_same_trajectory(const std::vector<TaskRun>& got, const TaskRun& reference) {
  for (size_t r = 0; r < got.size(); ++r) {
    INFO("task " << r);
    REQUIRE(got[r].losses.size() == reference.losses.size());
    for (size_t s = 0; s < reference.losses.size(); ++s) {
      INFO("step " << s);
      CHECK(got[r].losses[s] == Approx(reference.losses[s]).epsilon(1e-5));
    }
    for (const auto& [name, values] : reference.params) {
      INFO(name);
      const std::vector<float>& mine = got[r].params.at(name);
      REQUIRE(mine.size() == values.size());
      float largest = 0.0f, diff = 0.0f;
      for (size_t i = 0; i < values.size(); ++i) {
        largest = std::max(largest, std::abs(values[i]));
        diff = std::max(diff, std::abs(mine[i] - values[i]));
      }
      CHECK(diff <= 1e-5f * largest);
    }
  }
}

// The elements of the 325-float range (tensors at 0, 128, 192, 320) inside task r's slice of n.
int64_t slice_elements(int r, int n) {
  const int64_t offsets[] = {0, 128, 192, 320}, sizes[] = {96, 16, 80, 5};
  const int64_t flat = 325, chunk = (flat + n - 1) / n;
  const int64_t lo = std::min(flat, chunk * r), hi = std::min(flat, lo + chunk);
  int64_t count = 0;
  for (int i = 0; i < 4; ++i)
    count += std::max<int64_t>(0, std::min(hi, offsets[i] + sizes[i]) - std::max(lo, offsets[i]));
  return count;
}

// The whole optimizer state (or model) assembled from every task's pieces; each
// element must come from exactly one piece.
TensorMap assemble(const std::vector<TaskRun>& tasks, bool optimizer = true) {
  TensorMap whole;
  std::map<std::string, std::vector<int>> covered;
  for (const TaskRun& t : tasks)
    for (const strategy::StatePiece& piece : t.pieces) {
      if (piece.optimizer != optimizer) continue;
      auto [it, added] = whole.emplace(piece.name, Tensor(piece.whole_shape));
      std::vector<int>& hits = covered[piece.name];
      hits.resize(static_cast<size_t>(it->second.numel()));
      const Tensor host = piece.value->to_host();
      for (int64_t i = 0; i < host.numel(); ++i) {
        it->second.data()[piece.offset + i] = host.data()[i];
        ++hits[static_cast<size_t>(piece.offset + i)];
      }
    }
  for (const auto& [name, hits] : covered) {
    INFO(name);
    CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  }
  return whole;
}

}  // namespace

TEST_CASE("ZeRO-1 follows the unsharded run over 20 steps, Adam and SGD with momentum, N = 1..4 (padded)") {
  for (const char* optimizer : {kAdam, kMomentum}) {
    for (int n : {1, 2, 3, 4}) {
      CAPTURE(optimizer, n);
      const std::vector<TaskRun> unsharded = run(zero_job(false, optimizer), n);
      const std::vector<TaskRun> sharded = run(zero_job(true, optimizer), n);
      check_same_trajectory(sharded, unsharded[0]);
      check_same_trajectory(unsharded, unsharded[0]);
      CHECK(unsharded[0].losses.back() < unsharded[0].losses.front() * 0.9);  // it learns
      // Each task holds the slots of exactly its slice; together, the whole state once.
      const int64_t slots = std::string(optimizer) == kAdam ? 2 : 1;
      CHECK(unsharded[0].state_bytes == slots * 197 * 4);  // 96 + 16 + 80 + 5 floats per slot
      int64_t total = 0;
      for (int r = 0; r < n; ++r) {
        INFO("task " << r);
        CHECK(sharded[r].state_bytes == slots * slice_elements(r, n) * 4);
        CHECK(sharded[r].strategy->optimizer_state_shards() == n);
        total += sharded[r].state_bytes;
      }
      CHECK(total == unsharded[0].state_bytes);
    }
  }
}

TEST_CASE("ZeRO-1 with Gloo's reduce_scatter and all_gather (3 tasks, padded) follows the unsharded run") {
  RunOptions o;
  o.gloo = true;
  const std::vector<TaskRun> unsharded = run(zero_job(false, kAdam), 3, o);
  check_same_trajectory(run(zero_job(true, kAdam), 3, o), unsharded[0]);
}

TEST_CASE("ZeRO-1 clips by each param's norm over all tasks, scales losses and accumulates like the unsharded run") {
  SECTION("clipnorm and global_clipnorm") {
    const char* const clipped[] = {R"({"type": "adam", "learning_rate": 0.01, "clipnorm": 0.05})",
                                   R"({"type": "sgd", "learning_rate": 0.1, "momentum": 0.9, "global_clipnorm": 0.05})"};
    for (const char* optimizer : clipped) {
      CAPTURE(optimizer);
      const std::vector<TaskRun> unsharded = run(zero_job(false, optimizer), 3);
      check_same_trajectory(run(zero_job(true, optimizer), 3), unsharded[0]);
      // The limit acts: without it the run differs.
      const bool adam = std::string(optimizer).find("adam") != std::string::npos;
      const std::vector<TaskRun> unclipped = run(zero_job(false, adam ? kAdam : kMomentum), 3);
      CHECK(std::abs(unclipped[0].losses.back() - unsharded[0].losses.back()) > 1e-4);
    }
  }
  SECTION("dynamic loss scaling") {
    RunOptions o;
    o.loss_scaling = true;
    const std::vector<TaskRun> unsharded = run(zero_job(false, kAdam), 2, o);
    const std::vector<TaskRun> sharded = run(zero_job(true, kAdam), 2, o);
    check_same_trajectory(sharded, unsharded[0]);
    CHECK(sharded[1].strategy->loss_scale()->scale() == unsharded[0].strategy->loss_scale()->scale());
  }
  SECTION("gradient accumulation") {
    RunOptions o;
    o.accumulation = 2;
    o.steps = 10;
    const std::vector<TaskRun> unsharded = run(zero_job(false, kMomentum), 3, o);
    check_same_trajectory(run(zero_job(true, kMomentum), 3, o), unsharded[0]);
  }
}

TEST_CASE("ZeRO-1 state: whole slots load into any N, come back whole from the pieces, and resume the same") {
  // Five unsharded steps on 2 tasks: the checkpoint (model and whole optimizer state).
  RunOptions first;
  first.steps = 5;
  const std::vector<TaskRun> before = run(zero_job(false, kAdam), 2, first);
  TensorMap model, optimizer;
  for (const nn::Param* p : before[0].strategy->model().params()) model[p->name] = p->value.clone();
  for (const nn::Param* p : before[0].strategy->optimizer().state()) optimizer[p->name] = p->value.clone();
  REQUIRE(optimizer.size() == 8);  // m and v of 4 tensors

  // Loaded into 3 sharded tasks and taken back out of their checkpoint pieces: the same slots.
  RunOptions loaded;
  loaded.steps = 0;
  loaded.start_model = &model;
  loaded.start_optimizer = &optimizer;
  const std::vector<TaskRun> sharded = run(zero_job(true, kAdam), 3, loaded);
  const TensorMap back = assemble(sharded);
  REQUIRE(back.size() == optimizer.size());
  for (const auto& [name, whole] : optimizer) {
    INFO(name);
    const Tensor& got = back.at(name);
    REQUIRE(got.shape() == whole.shape());
    CHECK(std::equal(got.data(), got.data() + got.numel(), whole.data()));
  }
  // The model comes whole from the chief only.
  for (size_t r = 0; r < sharded.size(); ++r) {
    const auto model_pieces = std::count_if(sharded[r].pieces.begin(), sharded[r].pieces.end(),
                                            [](const strategy::StatePiece& p) { return !p.optimizer; });
    CHECK(model_pieces == (r == 0 ? 4 : 0));
  }
  CHECK(sharded[0].strategy->sharded_state());

  // ...and back into an unsharded strategy: the same slots again.
  RunOptions into_one = loaded;
  into_one.start_optimizer = &back;
  const std::vector<TaskRun> unsharded_again = run(zero_job(false, kAdam), 1, into_one);
  for (const nn::Param* p : unsharded_again[0].strategy->optimizer().state()) {
    INFO(p->name);
    const Tensor host = p->value.to_host();
    CHECK(std::equal(host.data(), host.data() + host.numel(), optimizer.at(p->name).data()));
  }

  // Resuming onto 3 tasks, sharded or not: the same trajectory.
  RunOptions resume = loaded;
  resume.steps = 5;
  resume.first_step = 5;
  const std::vector<TaskRun> resumed_unsharded = run(zero_job(false, kAdam), 3, resume);
  check_same_trajectory(run(zero_job(true, kAdam), 3, resume), resumed_unsharded[0]);

  // A sharded task's own current slots (restore_best_weights) load back unchanged.
  strategy::Strategy& s = *sharded[1].strategy;
  TensorMap own;
  for (const nn::Param* p : s.optimizer().state()) own[p->name] = p->value.clone();
  for (nn::Param* p : s.optimizer().state()) p->value.zero();
  s.load_state(lookup_in(model), lookup_in(own));
  for (const nn::Param* p : s.optimizer().state()) {
    INFO(p->name);
    CHECK(std::equal(p->value.data(), p->value.data() + p->value.numel(), own.at(p->name).data()));
  }
}

TEST_CASE("ZeRO-1: what it does not do is a ConfigError saying what to do instead") {
  auto group = comm::make_local_group(1);
  const strategy::StrategyContext context{group[0].get(), 1};
  job::JobConfig replicas = zero_job(true, kAdam);
  replicas.strategy.replicas = 2;
  CHECK_THROWS_WITH(strategy::make_strategy(replicas.strategy_job(), context), Contains("one replica per task"));
  job::JobConfig bf16 = zero_job(true, kAdam);
  bf16.strategy.allreduce_dtype = strategy::AllreduceDType::kBfloat16;
  CHECK_THROWS_AS(strategy::make_strategy(bf16.strategy_job(), context), ConfigError);
  job::JobConfig nccl = zero_job(true, kAdam);
  nccl.strategy.communication = strategy::Communication::kNccl;
  CHECK_THROWS_WITH(strategy::make_strategy(nccl.strategy_job(), context), Contains("use \"auto\" or \"ring\""));
  // Only multi_worker_mirrored reads the key.
  CHECK_THROWS_WITH(test::tiny_dense_job("mirrored", R"(, "shard_optimizer_state": true)"),
                    Contains("only multi_worker_mirrored"));
}

namespace {

// Four Dense layers with a Dropout of rate 0 between (a layer without params)
// and sizes that divide by none of 3 or 4: the units of 112, 144, 80 and 21 floats
// (padded: 128 + 64, 128 + 64 ...) cut into chunks with padding.
job::JobConfig full_job(strategy::ShardMode mode, const std::string& optimizer, bool prefetch = true,
                        int64_t min_unit_params = 0) {
  job::JobConfig job = job::parse_job_config(R"({
    "strategy": {"type": "multi_worker_mirrored"},
    "model": {"input_shape": [6], "layers": [{"type": "Dense", "units": 16, "activation": "tanh"},
                                             {"type": "Dense", "units": 8, "activation": "relu"},
                                             {"type": "Dropout", "rate": 0.0},
                                             {"type": "Dense", "units": 10, "activation": "gelu"},
                                             {"type": "Dense", "units": 3}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": )" + optimizer + R"(,
    "data": {"train": {"format": "synthetic", "shape": [6], "count": 64, "classes": 3}},
    "train": {"batch_size_per_replica": 4, "seed": 7}})",
                                             "job.json");
  job.strategy.shard = mode;
  job.strategy.prefetch = prefetch;
  job.strategy.min_unit_params = min_unit_params;
  return job;
}

using strategy::ShardMode;

// Every trainable tensor's elements held in `tasks`' slots, as a share of all (1.0: each exactly once).
void check_slots_split(const std::vector<TaskRun>& tasks, int64_t whole_bytes) {
  int64_t total = 0;
  for (const TaskRun& t : tasks) {
    CHECK((tasks.size() == 1 || t.state_bytes < whole_bytes));
    total += t.state_bytes;
  }
  CHECK(total == whole_bytes);
}

// The share of `t`'s pages that are resident (mincore).
double resident_share(const Tensor& t) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data()) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(t.data() + t.numel());
  std::vector<unsigned char> in((end - begin + page - 1) / page);
  REQUIRE(mincore(reinterpret_cast<void*>(begin), end - begin, in.data()) == 0);
  return static_cast<double>(std::count_if(in.begin(), in.end(), [](unsigned char c) { return c & 1; })) /
         static_cast<double>(in.size());
}

}  // namespace

TEST_CASE("ZeRO-2 and ZeRO-3 follow the unsharded run over 20 steps, N = 1..4, with and without prefetch") {
  for (const char* optimizer : {kAdam, kMomentum}) {
    for (int n : {1, 2, 3, 4}) {
      const std::vector<TaskRun> reference = run(full_job(ShardMode::kNone, optimizer), n);
      CHECK(reference[0].losses.back() != reference[0].losses.front());  // it trains
      for (ShardMode mode : {ShardMode::kGradients, ShardMode::kParameters})
        for (bool prefetch : {true, false}) {
          if (mode == ShardMode::kGradients && !prefetch) continue;
          CAPTURE(optimizer, n, strategy::shard_mode_name(mode), prefetch);
          const std::vector<TaskRun> sharded = run(full_job(mode, optimizer, prefetch), n);
          check_same_trajectory(sharded, reference[0]);
          check_slots_split(sharded, reference[0].state_bytes);
          CHECK(sharded[0].strategy->optimizer_state_shards() == n);
        }
    }
  }
}

TEST_CASE("ZeRO-2 and ZeRO-3 with min_unit_params group layers into units and follow the unsharded run") {
  // The layers' trainable parameters: 112, 136, (the dropout), 90, 33.
  const std::vector<TaskRun> reference = run(full_job(ShardMode::kNone, kAdam), 3);
  struct Case {
    int64_t min_params;
    size_t units;
  };
  for (const Case c : {Case{0, 4}, Case{200, 2}, Case{250, 2}, Case{400, 1}})
    for (ShardMode mode : {ShardMode::kGradients, ShardMode::kParameters})
      for (bool prefetch : {true, false}) {
        if (mode == ShardMode::kGradients && !prefetch) continue;
        CAPTURE(c.min_params, strategy::shard_mode_name(mode), prefetch);
        const std::vector<TaskRun> sharded = run(full_job(mode, kAdam, prefetch, c.min_params), 3);
        // 200: dense + dense_1 (248), then dense_2 + dense_3 (123: the last unit, below the size);
        // 250: dense .. dense_2 (338), then dense_3; 400: all 371 in one unit.
        CHECK(dynamic_cast<strategy::DataParallelStrategy&>(*sharded[0].strategy).shard_units() == c.units);
        check_same_trajectory(sharded, reference[0]);
        check_slots_split(sharded, reference[0].state_bytes);
      }
  // The estimate groups the same way: the largest unit, and with it stage 3's
  // layers in flight, grows.
  strategy::MemoryQuery q;
  q.model = full_job(ShardMode::kParameters, kAdam).model;
  q.optimizer = full_job(ShardMode::kParameters, kAdam).optimizer;
  q.full_shard = "parameters";
  q.full_shards = q.optimizer_shards = 3;
  const int64_t per_layer = strategy::estimate_memory(q).parameters;
  q.min_unit_params = 100000;
  CHECK(strategy::estimate_memory(q).parameters > per_layer);
  CHECK_THROWS_WITH(test::tiny_dense_job("multi_worker_mirrored", R"(, "min_unit_params": 10)"),
                    Contains("applies only to \"shard\": \"gradients\" or \"parameters\""));
}

TEST_CASE("ZeRO-2 and ZeRO-3 over Gloo, with norm clipping and gradient accumulation, follow the unsharded run") {
  RunOptions gloo;
  gloo.gloo = true;
  const std::vector<TaskRun> unsharded = run(full_job(ShardMode::kNone, kAdam), 3, gloo);
  INFO("gloo");
  check_same_trajectory(run(full_job(ShardMode::kParameters, kAdam), 3, gloo), unsharded[0]);
  check_same_trajectory(run(full_job(ShardMode::kGradients, kAdam), 3, gloo), unsharded[0]);
  for (const char* optimizer : {R"({"type": "adam", "learning_rate": 0.01, "clipnorm": 0.05})",
                                R"({"type": "sgd", "learning_rate": 0.1, "momentum": 0.9, "global_clipnorm": 0.05})"}) {
    CAPTURE(optimizer);
    const std::vector<TaskRun> clipped = run(full_job(ShardMode::kNone, optimizer), 4);
    check_same_trajectory(run(full_job(ShardMode::kParameters, optimizer), 4), clipped[0]);
  }
  INFO("accumulation");
  RunOptions accumulate;
  accumulate.accumulation = 3;
  accumulate.steps = 8;
  const std::vector<TaskRun> accumulated = run(full_job(ShardMode::kNone, kMomentum), 2, accumulate);
  check_same_trajectory(run(full_job(ShardMode::kParameters, kMomentum), 2, accumulate), accumulated[0]);
  check_same_trajectory(run(full_job(ShardMode::kGradients, kMomentum), 2, accumulate), accumulated[0]);
}

TEST_CASE("ZeRO-3 frees the pages of the layers it is not running, ZeRO-2 those of the gradients") {
  // Two Dense layers of 1 MiB kernels: 256 pages each.
  const auto big_job = [](ShardMode mode) {
    job::JobConfig job = job::parse_job_config(R"({
      "strategy": {"type": "multi_worker_mirrored"},
      "model": {"input_shape": [6], "layers": [{"type": "Dense", "units": 512, "activation": "relu"},
                                               {"type": "Dense", "units": 512, "activation": "relu"},
                                               {"type": "Dense", "units": 512, "activation": "relu"},
                                               {"type": "Dense", "units": 3}]},
      "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
      "optimizer": {"type": "sgd", "learning_rate": 0.01},
      "data": {"train": {"format": "synthetic", "shape": [6], "count": 64, "classes": 3}},
      "train": {"batch_size_per_replica": 4, "seed": 7}})",
                                               "job.json");
    job.strategy.shard = mode;
    return job;
  };
  RunOptions o;
  o.steps = 2;
  for (ShardMode mode : {ShardMode::kNone, ShardMode::kGradients, ShardMode::kParameters}) {
    CAPTURE(strategy::shard_mode_name(mode));
    const std::vector<TaskRun> tasks = run(big_job(mode), 2, o);
    // dense_1's kernel (512 x 512): neither the first nor the last unit.
    for (const TaskRun& t : tasks) {
      const nn::Param* kernel = t.strategy->model().trainable_params()[2];
      REQUIRE(kernel->value.numel() == 512 * 512);
      const double values = resident_share(kernel->value), grads = resident_share(kernel->grad);
      CHECK(values == (mode == ShardMode::kParameters ? Approx(0.0).margin(0.01) : Approx(1.0)));
      CHECK(grads == (mode == ShardMode::kNone ? Approx(1.0) : Approx(0.0).margin(0.01)));
    }
  }
}

TEST_CASE("ZeRO-3 state: its pieces are the whole model and slots, load into another N and resume the same") {
  RunOptions first;
  first.steps = 5;
  const std::vector<TaskRun> sharded = run(full_job(ShardMode::kParameters, kAdam), 3, first);
  const std::vector<TaskRun> unsharded = run(full_job(ShardMode::kNone, kAdam), 3, first);
  // The pieces put together: every element exactly once, equal to the unsharded run's state.
  const TensorMap model = assemble(sharded, false), optimizer = assemble(sharded, true);
  REQUIRE(model.size() == 8);
  REQUIRE(optimizer.size() == 16);
  for (const auto& [name, values] : unsharded[0].params) {
    INFO(name);
    const Tensor& got = model.at(name);
    for (size_t i = 0; i < values.size(); ++i) REQUIRE(got.data()[i] == Approx(values[i]).epsilon(1e-5).margin(1e-7));
  }

  // Resumed from those tensors on 2 and 4 tasks, ZeRO-3 and ZeRO-2: the unsharded resumed run's trajectory.
  RunOptions resume;
  resume.steps = 5;
  resume.first_step = 5;
  resume.start_model = &model;
  resume.start_optimizer = &optimizer;
  for (int n : {2, 4}) {
    CAPTURE(n);
    const std::vector<TaskRun> reference = run(full_job(ShardMode::kNone, kAdam), n, resume);
    check_same_trajectory(run(full_job(ShardMode::kParameters, kAdam), n, resume), reference[0]);
    check_same_trajectory(run(full_job(ShardMode::kGradients, kAdam), n, resume), reference[0]);
  }
  // The hash of the whole model, the same on every task and as the unsharded model that holds it.
  RunOptions loaded = resume;
  loaded.steps = 0;
  const std::vector<TaskRun> at_three = run(full_job(ShardMode::kParameters, kAdam), 3, loaded);
  const std::vector<TaskRun> at_one = run(full_job(ShardMode::kNone, kAdam), 1, loaded);
  std::vector<std::string> hashes(3);
  test::check_all_ok(test::run_on_threads(3, [&](int r) -> std::string {
    hashes[static_cast<size_t>(r)] = at_three[static_cast<size_t>(r)].strategy->params_sha256();
    return "";
  }));
  for (const std::string& h : hashes) CHECK(h == at_one[0].strategy->params_sha256());
}

TEST_CASE("ZeRO-2 and ZeRO-3: what they do not do is a ConfigError saying what to do instead") {
  auto group = comm::make_local_group(1);
  strategy::StrategyContext context{group[0].get(), 1};
  job::JobConfig replicas = full_job(ShardMode::kParameters, kAdam);
  replicas.strategy.replicas = 2;
  CHECK_THROWS_WITH(strategy::make_strategy(replicas.strategy_job(), context), Contains("one replica per task"));
  job::JobConfig bf16 = full_job(ShardMode::kGradients, kAdam);
  bf16.strategy.allreduce_dtype = strategy::AllreduceDType::kBfloat16;
  CHECK_THROWS_WITH(strategy::make_strategy(bf16.strategy_job(), context), Contains("use \"float32\""));
  job::JobConfig mixed = full_job(ShardMode::kParameters, kAdam);
  mixed.model.compute_dtype = DType::kBF16;
  CHECK_THROWS_WITH(strategy::make_strategy(mixed.strategy_job(), context), Contains("train.precision"));
  context.loss_scaling = true;
  CHECK_THROWS_WITH(strategy::make_strategy(full_job(ShardMode::kParameters, kAdam).strategy_job(), context),
                    Contains("does not scale the loss"));
  // The keys, as read.
  CHECK_THROWS_WITH(test::tiny_dense_job("mirrored", R"(, "shard": "parameters")"), Contains("only multi_worker_mirrored"));
  CHECK_THROWS_WITH(test::tiny_dense_job("multi_worker_mirrored", R"(, "shard": "gradients", "shard_optimizer_state": true)"),
                    Contains("keep one of them"));
  CHECK_THROWS_WITH(test::tiny_dense_job("multi_worker_mirrored", R"(, "shard": "gradients", "prefetch": false)"),
                    Contains("applies only to"));
  CHECK_THROWS_WITH(test::tiny_dense_job("multi_worker_mirrored", R"(, "shard": "everything")"), Contains("parameters"));
  CHECK_THROWS_WITH(test::tiny_dense_job("multi_worker_mirrored", R"(, "shard": "parameters", "tensor_parallel": 2)"),
                    Contains("ZeRO over a tensor-parallel model"));
  CHECK_THROWS_WITH(test::tiny_dense_job("multi_worker_mirrored", R"(, "shard": "parameters", "elastic": {})"),
                    Contains("does not go with shard"));
  const job::JobConfig same = test::tiny_dense_job("multi_worker_mirrored", R"(, "shard": "optimizer_state")");
  CHECK(same.strategy.shard_optimizer_state);
}
