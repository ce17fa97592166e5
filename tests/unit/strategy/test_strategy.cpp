// Strategies from the registry, on threads of this process: multi_worker_mirrored
// with two ranks whose Gloo communicator meets through an InMemoryStore (no store
// sockets) trains exactly like one_device on the two ranks' batches together, and
// both ranks end with the same parameters. Gradient clipping acts on the averaged
// gradient (mirrored and central_storage follow one_device), and rmsprop's and
// adagrad's slots resume through load_state. Also the registry's own contract.
// (The job is parsed with lib/job, which sits above strategy: tests may link up.)
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/gloo/gloo_communicator.h"
#include "comm/local/local_communicator.h"
#include "job/job_config.h"
#include "core/error.h"
#include "core/rng.h"
#include "optim/optimizer.h"
#include "rendezvous/store.h"
#include "strategy/sync/gradient_reducer.h"
#include "strategy/registry.h"
#include "support/rank_threads.h"
#include "support/tiny_dense_job.h"
#include "tensor/arena.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

job::JobConfig job_of(const std::string& strategy, const std::string& extra = "") {
  return test::tiny_dense_job(strategy, extra);
}

data::Batch batch(int64_t step, int64_t first, int64_t rows) { return test::tiny_dense_batch(step, first, rows); }

constexpr int kSteps = 6;

// Rank `rank` of a Gloo group of `size` that meets through `store`.
std::unique_ptr<comm::Communicator> workers_group(rendezvous::Store& store, int rank, int size) {
  comm::GlooOptions o;
  o.rank = rank;
  o.size = size;
  o.prefix = "comm/workers/";
  o.timeout_seconds = 30.0;
  return comm::make_gloo_communicator(store, o);
}

}  // namespace

TEST_CASE("registry: every strategy.type has an entry, and unknown names are ConfigErrors") {
  for (const char* name : {"one_device", "mirrored", "multi_worker_mirrored", "central_storage", "parameter_server"})
    CHECK(strategy::find_strategy(name).name == name);
  CHECK(strategy::find_strategy("multi_worker_mirrored").cross_task == strategy::CrossTask::kAllReduce);
  CHECK(strategy::find_strategy("mirrored").local_replicas);
  CHECK(strategy::find_strategy("central_storage").local_replicas);
  CHECK_THROWS_WITH(strategy::find_strategy("mirrorred"), Contains("unknown strategy 'mirrorred'"));
  CHECK_THROWS_WITH(strategy::make_strategy(job_of("multi_worker_mirrored").strategy_job()), Contains("needs a cluster"));
}

TEST_CASE("multi_worker_mirrored on two ranks over an in-memory store equals one_device on both batches") {
  // The reference: one replica on the 8-row batch of both ranks together.
  std::vector<double> reference_loss;
  double reference_eval = 0.0;  // after the last update, on a batch no step saw
  {
    const job::JobConfig one_job = job_of("one_device");
    auto one = strategy::make_strategy(one_job.strategy_job(), {nullptr, 1});
    for (int64_t s = 0; s < kSteps; ++s) {
      nn::LossStats stats;
      one->train_step({batch(s, 0, 8)}, s, stats);
      reference_loss.push_back(stats.loss_sum / static_cast<double>(stats.count));
    }
    nn::LossStats eval;
    one->eval_step(batch(99, 0, 8), eval);
    reference_eval = eval.loss_sum / static_cast<double>(eval.count);
  }

  rendezvous::InMemoryStore store;
  std::vector<std::vector<double>> losses(2);
  std::vector<std::string> hashes(2);
  std::vector<double> evals(2);
  const auto problems = test::run_on_threads(2, [&](int rank) -> std::string {
    auto workers = workers_group(store, rank, 2);
    const job::JobConfig mwm = job_of("multi_worker_mirrored");
    auto s = strategy::make_strategy(mwm.strategy_job(), {workers.get(), 1});
    if (s->num_replicas_in_sync() != 2) return "not 2 replicas in sync";
    for (int64_t step = 0; step < kSteps; ++step) {
      nn::LossStats stats;
      s->train_step({batch(step, 4 * rank, 4)}, step, stats);  // rank r: rows 4r..4r+3
      losses[rank].push_back(stats.loss_sum / static_cast<double>(stats.count));
    }
    hashes[rank] = s->model().params_sha256();
    nn::LossStats eval;
    s->eval_step(batch(99, 0, 8), eval);
    evals[rank] = eval.loss_sum / static_cast<double>(eval.count);
    return "";
  });
  test::check_all_ok(problems);
  CHECK(hashes[0] == hashes[1]);
  for (int rank = 0; rank < 2; ++rank) CHECK(evals[rank] == Approx(reference_eval).epsilon(1e-5));
  for (int rank = 0; rank < 2; ++rank)
    for (int step = 0; step < kSteps; ++step) {
      INFO("rank " << rank << " step " << step);
      CHECK(losses[rank][step] == Approx(reference_loss[step]).epsilon(1e-5));
    }
}

TEST_CASE("central_storage with 2 replicas follows mirrored's loss trajectory and parameters") {
  std::vector<std::vector<double>> losses(2);
  std::vector<double> evals(2);
  const char* names[2] = {"mirrored", "central_storage"};
  for (int k = 0; k < 2; ++k) {
    job::JobConfig job = job_of(names[k]);
    job.strategy.replicas = 2;
    auto s = strategy::make_strategy(job.strategy_job(), {nullptr, 2});
    REQUIRE(s->local_replicas() == 2);
    for (int64_t step = 0; step < 20; ++step) {
      nn::LossStats stats;
      s->train_step({batch(step % 2, 0, 8)}, step, stats);  // two batches in turn, 4 rows per replica
      losses[k].push_back(stats.loss_sum / static_cast<double>(stats.count));
    }
    nn::LossStats eval;
    s->eval_step(batch(99, 0, 8), eval);  // the central copy's values, after the last update
    evals[k] = eval.loss_sum / static_cast<double>(eval.count);
  }
  for (int step = 0; step < 20; ++step) {
    INFO("step " << step);
    CHECK(losses[1][step] == Approx(losses[0][step]).epsilon(1e-4));
  }
  CHECK(losses[1][19] < losses[1][0] * 0.9);  // it learns
  CHECK(evals[1] == Approx(evals[0]).epsilon(1e-4));
}

TEST_CASE("cluster roles: several training tasks need a cross-task strategy, ps tasks need parameter_server") {
  config::ClusterSpec two_workers;
  two_workers.tasks["worker"] = {"localhost:1", "localhost:2"};
  CHECK_THROWS_WITH(strategy::check_cluster_roles(job_of("one_device").strategy, two_workers, "TF_CONFIG"),
                    Contains("set strategy.type to multi_worker_mirrored or parameter_server"));
  CHECK_THROWS_WITH(strategy::check_cluster_roles(job_of("mirrored").strategy, two_workers, "TF_CONFIG"),
                    Contains("would train independent models"));
  CHECK_NOTHROW(strategy::check_cluster_roles(job_of("multi_worker_mirrored").strategy, two_workers, "TF_CONFIG"));
  config::ClusterSpec with_ps = two_workers;
  with_ps.tasks["ps"] = {"localhost:3"};
  CHECK_THROWS_WITH(strategy::check_cluster_roles(job_of("multi_worker_mirrored").strategy, with_ps, "TF_CONFIG"),
                    Contains("they would idle"));
  config::ClusterSpec one_with_evaluator;
  one_with_evaluator.tasks["worker"] = {"localhost:1"};
  one_with_evaluator.tasks["evaluator"] = {"localhost:4"};
  CHECK_NOTHROW(strategy::check_cluster_roles(job_of("one_device").strategy, one_with_evaluator, "TF_CONFIG"));
}

TEST_CASE("gradient buckets average the gradients, and values riding along come back summed") {
  constexpr int kRanks = 3;
  auto group = comm::make_local_group(kRanks, 30.0);
  std::vector<std::vector<float>> extras(kRanks), grads(kRanks);
  test::check_all_ok(test::run_on_threads(kRanks, [&](int rank) -> std::string {
    // Two params in small buckets (bytes_per_pack 16: a bucket each), gradients rank + 1.
    std::vector<nn::Param> params(2);
    for (int i = 0; i < 2; ++i) {
      params[i].name = "p" + std::to_string(i);
      params[i].value = Tensor({4});
      params[i].grad = Tensor({4});
      for (int e = 0; e < 4; ++e) params[i].grad.data()[e] = static_cast<float>(rank + 1);
    }
    std::vector<nn::Param*> pointers = {&params[0], &params[1]};
    strategy::GradientReducer reducer(pointers, *group[rank], 16);
    if (reducer.bucket_count() != 2) return "expected 2 buckets";
    reducer.ride_along(2, [rank](float* out) {
      out[0] = 10.0f * static_cast<float>(rank);  // a loss sum
      out[1] = rank == 1 ? 1.0f : 0.0f;          // one rank asks to stop
    });
    for (int step = 0; step < 2; ++step) {
      reducer.begin_step();
      reducer.param_ready(&params[1]);  // backward order: the last param first
      reducer.param_ready(&params[0]);
      reducer.finish_step();
    }
    extras[rank] = reducer.extras();
    grads[rank].assign(params[0].grad.data(), params[0].grad.data() + 4);
    return "";
  }));
  for (int rank = 0; rank < kRanks; ++rank) {
    INFO("rank " << rank);
    CHECK(extras[rank] == std::vector<float>{30.0f, 1.0f});  // 0 + 10 + 20, and the stop flag seen by all
    CHECK(grads[rank] == std::vector<float>(4, 2.0f));       // the mean of 1, 2, 3 (twice: it stays 2)
  }
}

namespace {

// Three params of 5, 20 and 3 floats whose gradients lie back to back in
// `arena` (padded) or, without one, in tensors of their own; gradient element e
// of param i is value(i, e). In buckets of at least 80 bytes: {p2, p1} and {p0}.
constexpr int64_t kThreeSizes[3] = {5, 20, 3};
std::vector<nn::Param> three_params(TensorArena* arena, const std::function<float(int, int64_t)>& value) {
  std::vector<nn::Param> params(3);
  for (int i = 0; i < 3; ++i) {
    params[i].name = "p" + std::to_string(i);
    params[i].grad = arena ? arena->take({kThreeSizes[i]}) : Tensor({kThreeSizes[i]});
    for (int64_t e = 0; e < kThreeSizes[i]; ++e) params[i].grad.data()[e] = value(i, e);
  }
  return params;
}

// One step of `reducer` over the three params, in backward's order.
void reduce_three(strategy::GradientReducer& reducer, std::vector<nn::Param>& params) {
  reducer.begin_step();
  for (int i = 2; i >= 0; --i) reducer.param_ready(&params[i]);
  reducer.finish_step();
}

}  // namespace

TEST_CASE("gradient buckets of arena gradients are views, reduced where they lie, and a ride-along packs the last") {
  constexpr int kRanks = 2;
  auto group = comm::make_local_group(kRanks, 30.0);
  for (const bool ride : {false, true}) {
    INFO("ride along " << ride);
    std::vector<std::vector<float>> whole(kRanks);
    std::vector<size_t> views(kRanks);
    test::check_all_ok(test::run_on_threads(kRanks, [&](int rank) -> std::string {
      Tensor base({3 * TensorArena::kAlignFloats});
      TensorArena arena(base);
      std::vector<nn::Param> params = three_params(&arena, [rank](int i, int64_t e) {
        return static_cast<float>((rank + 1) * (i + 1)) + static_cast<float>(e);
      });
      std::vector<nn::Param*> pointers = {&params[0], &params[1], &params[2]};
      strategy::GradientReducer reducer(pointers, *group[rank], 80);
      if (reducer.bucket_count() != 2) return "expected 2 buckets";
      if (ride) reducer.ride_along(1, [rank](float* out) { out[0] = static_cast<float>(rank); });
      views[rank] = reducer.view_buckets();
      reduce_three(reducer, params);
      if (ride && reducer.extras() != std::vector<float>{1.0f}) return "the ride-along's sum is wrong";
      whole[rank].assign(base.data(), base.data() + base.numel());
      return "";
    }));
    CHECK(views[0] == (ride ? 1u : 2u));
    // The mean of rank 0's and rank 1's values (factors 1 and 2: 1.5x), the padding still zero.
    const int64_t padded[3] = {TensorArena::padded(5), TensorArena::padded(20), TensorArena::padded(3)};
    int64_t at = 0;
    for (int i = 0; i < 3; ++i) {
      for (int64_t e = 0; e < padded[i]; ++e) {
        const float expected = e < (i == 0 ? 5 : i == 1 ? 20 : 3)
                                   ? 1.5f * static_cast<float>(i + 1) + static_cast<float>(e)
                                   : 0.0f;
        CHECK(whole[0][static_cast<size_t>(at + e)] == expected);
      }
      at += padded[i];
    }
    CHECK(whole[0] == whole[1]);
  }
}

TEST_CASE("gradient buckets travel in one layout: a task that views its arena and one that packs agree") {
  // Rank 0's gradients lie in an arena (views); rank 1's are separate tensors
  // (packed, as a GPU task's host copies are): the same floats must go on the wire.
  constexpr int kRanks = 2;
  auto group = comm::make_local_group(kRanks, 30.0);
  std::vector<std::vector<float>> grads(kRanks);
  std::vector<size_t> views(kRanks);
  test::check_all_ok(test::run_on_threads(kRanks, [&](int rank) -> std::string {
    Tensor base({3 * TensorArena::kAlignFloats});
    TensorArena arena(base);
    std::vector<nn::Param> params =
        three_params(rank == 0 ? &arena : nullptr, [rank](int i, int64_t) { return static_cast<float>(rank * 10 + i); });
    std::vector<nn::Param*> pointers = {&params[0], &params[1], &params[2]};
    strategy::GradientReducer reducer(pointers, *group[rank], 80);
    views[rank] = reducer.view_buckets();
    for (int step = 0; step < 2; ++step) reduce_three(reducer, params);
    for (const nn::Param& p : params) grads[rank].insert(grads[rank].end(), p.grad.data(), p.grad.data() + p.grad.numel());
    return "";
  }));
  CHECK(views[0] == 2);
  CHECK(views[1] == 1);  // {p0} alone is a view of its own tensor; {p2, p1} is packed
  // The mean of i and 10 + i, element by element, on both.
  std::vector<float> expected;
  for (int i = 0; i < 3; ++i) expected.insert(expected.end(), static_cast<size_t>(i == 0 ? 5 : i == 1 ? 20 : 3), 5.0f + i);
  CHECK(grads[0] == expected);
  CHECK(grads[1] == expected);
}

namespace {

// The tiny job with rmsprop (centered, momentum) and the clipping option `clip`
// ("clipnorm", "global_clipnorm" or "" for none) at a limit small enough to act.
job::JobConfig clipped_job(const std::string& strategy, const std::string& clip) {
  job::JobConfig job = job_of(strategy);
  job.optimizer.type = &optim::optimizer_type("rmsprop");
  job.optimizer.learning_rate.initial_learning_rate = 0.01;
  job.optimizer.momentum = 0.5;
  job.optimizer.centered = true;
  if (clip == "clipnorm") job.optimizer.clipnorm = 0.05;
  if (clip == "global_clipnorm") job.optimizer.global_clipnorm = 0.05;
  return job;
}

// The per-step mean loss of `steps` steps on the 8-row batches, with `replicas` local replicas.
std::vector<double> loss_curve(const job::JobConfig& job, int replicas, int steps) {
  job::JobConfig j = job;
  j.strategy.replicas = replicas;
  auto s = strategy::make_strategy(j.strategy_job(), {nullptr, replicas});
  std::vector<double> out;
  for (int64_t step = 0; step < steps; ++step) {
    nn::LossStats stats;
    s->train_step({batch(step % 2, 0, 8)}, step, stats);
    out.push_back(stats.loss_sum / static_cast<double>(stats.count));
  }
  return out;
}

}  // namespace

TEST_CASE("clipping acts on the averaged gradient: mirrored and central_storage follow one_device") {
  for (const char* clip : {"clipnorm", "global_clipnorm"}) {
    CAPTURE(clip);
    const std::vector<double> reference = loss_curve(clipped_job("one_device", clip), 1, 10);
    const std::vector<double> unclipped = loss_curve(clipped_job("one_device", ""), 1, 10);
    CHECK(std::abs(reference[9] - unclipped[9]) > 1e-3);  // the clip limit really acts
    for (const char* name : {"mirrored", "central_storage"}) {
      CAPTURE(name);
      const std::vector<double> losses = loss_curve(clipped_job(name, clip), 2, 10);
      for (int step = 0; step < 10; ++step) {
        INFO("step " << step);
        CHECK(losses[step] == Approx(reference[step]).epsilon(1e-4));
      }
    }
  }
}

TEST_CASE("rmsprop's and adagrad's slots go through load_state: a resumed run equals the uninterrupted one") {
  for (const char* type : {"rmsprop", "adagrad"}) {
    CAPTURE(type);
    job::JobConfig job = clipped_job("one_device", "global_clipnorm");
    job.optimizer.type = &optim::optimizer_type(type);
    auto whole = strategy::make_strategy(job.strategy_job(), {nullptr, 1});
    auto first = strategy::make_strategy(job.strategy_job(), {nullptr, 1});
    for (int64_t step = 0; step < 5; ++step) {
      nn::LossStats stats;
      whole->train_step({batch(step, 0, 8)}, step, stats);
      if (step < 3) first->train_step({batch(step, 0, 8)}, step, stats);
    }
    // What a checkpoint keeps: the params and the optimizer's slots, by name.
    std::map<std::string, Tensor> model, optimizer;
    for (const nn::Param* p : first->model().params()) model[p->name] = p->value.clone();
    for (const nn::Param* p : first->optimizer().state()) optimizer[p->name] = p->value.clone();
    const size_t slots = std::string(type) == "rmsprop" ? 3 : 1;
    CHECK(optimizer.size() == slots * first->model().trainable_params().size());
    CHECK(optimizer.count(std::string("dense/kernel/") + (slots == 3 ? "average_gradient" : "accumulator")));
    auto resumed = strategy::make_strategy(job.strategy_job(), {nullptr, 1});
    const auto lookup = [](const std::map<std::string, Tensor>& tensors) {
      return [&tensors](const std::string& name) -> const Tensor* {
        const auto it = tensors.find(name);
        return it == tensors.end() ? nullptr : &it->second;
      };
    };
    resumed->load_state(lookup(model), lookup(optimizer));
    for (int64_t step = 3; step < 5; ++step) {
      nn::LossStats stats;
      resumed->train_step({batch(step, 0, 8)}, step, stats);
    }
    CHECK(resumed->model().params_sha256() == whole->model().params_sha256());
  }
}

TEST_CASE("elastic split: whole micro-batches when they divide, else the fewest even micro-steps dealt out") {
  const strategy::ElasticSplit even = strategy::elastic_split(3, 8, 4, 3);  // 12 micro-batches of 8 over 3
  CHECK(even.accumulation == 4);
  CHECK(even.micro_batch == std::vector<int64_t>{8, 8, 8});
  CHECK(even.global_batch == 96);
  CHECK(even.even());
  CHECK(even.describe() == "4 micro-batches of 8 samples");
  const strategy::ElasticSplit start = strategy::elastic_split(2, 16, 4, 4);  // the start: as configured
  CHECK(start.accumulation == 2);
  CHECK(start.micro_batch == std::vector<int64_t>{16, 16, 16, 16});
  // 4 x 64 over 3: 2 micro-steps of 128 samples, 43 + 43 + 42 (at most the configured 64 each).
  const strategy::ElasticSplit uneven = strategy::elastic_split(1, 64, 4, 3);
  CHECK(uneven.accumulation == 2);
  CHECK(uneven.micro_batch == std::vector<int64_t>{43, 43, 42});
  CHECK(uneven.micro_step() == 128);
  CHECK(uneven.global_batch == 256);
  CHECK_FALSE(uneven.even());
  CHECK(uneven.describe() == "2 micro-batches of 43, 43, 42 samples");
  // 5 x 6 = 30 over 4: 2 micro-steps (30 is even) of 15: 4, 4, 4, 3.
  CHECK(strategy::elastic_split(1, 6, 5, 4).micro_batch == std::vector<int64_t>{4, 4, 4, 3});
  // 3 x 7 = 21 over 2: k = 2 does not divide 21, so 3 micro-steps of 7: 4 + 3.
  const strategy::ElasticSplit odd = strategy::elastic_split(1, 7, 3, 2);
  CHECK(odd.accumulation == 3);
  CHECK(odd.micro_batch == std::vector<int64_t>{4, 3});
  // 4 samples a step cannot give 3 tasks one each in 2 micro-steps.
  CHECK_THROWS_WITH(strategy::elastic_split(1, 1, 4, 3), Contains("cannot give each of 3 tasks"));
}

TEST_CASE("multi_worker_mirrored with unequal rows weighted by samples (an elastic split) equals one_device") {
  // The reference: one replica on 2 micro-batches of 8 rows a step.
  job::JobConfig one_job = job_of("one_device");
  one_job.train.gradient_accumulation_steps = 2;
  std::vector<double> reference_loss;
  std::vector<float> reference_params;
  {
    auto one = strategy::make_strategy(one_job.strategy_job(), {nullptr, 1});
    for (int64_t s = 0; s < kSteps; ++s) {
      nn::LossStats stats;
      one->train_step({batch(2 * s, 0, 8), batch(2 * s + 1, 0, 8)}, s, stats);
      reference_loss.push_back(stats.loss_sum / static_cast<double>(stats.count));
    }
    for (nn::Param* p : one->model().params())
      reference_params.insert(reference_params.end(), p->value.data(), p->value.data() + p->value.numel());
  }
  // 3 ranks take 3, 3 and 2 rows of each micro-batch of 8.
  const std::vector<int64_t> rows = {3, 3, 2}, first = {0, 3, 6};
  rendezvous::InMemoryStore store;
  std::vector<std::vector<double>> losses(3);
  std::vector<std::vector<float>> params(3);
  const auto problems = test::run_on_threads(3, [&](int rank) -> std::string {
    auto workers = workers_group(store, rank, 3);
    job::JobConfig mwm = job_of("multi_worker_mirrored");
    mwm.train.gradient_accumulation_steps = 2;
    mwm.train.batch_size_per_replica = rows[rank];
    strategy::StrategyContext context{workers.get(), 1};
    context.mean_replica_rows = 8.0 / 3.0;
    auto s = strategy::make_strategy(mwm.strategy_job(), context);
    for (int64_t step = 0; step < kSteps; ++step) {
      nn::LossStats stats;
      s->train_step({batch(2 * step, first[rank], rows[rank]), batch(2 * step + 1, first[rank], rows[rank])}, step,
                    stats);
      losses[rank].push_back(stats.loss_sum / static_cast<double>(stats.count));
    }
    for (nn::Param* p : s->model().params())
      params[rank].insert(params[rank].end(), p->value.data(), p->value.data() + p->value.numel());
    return "";
  });
  test::check_all_ok(problems);
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    REQUIRE(params[rank].size() == reference_params.size());
    for (size_t i = 0; i < reference_params.size(); ++i) CHECK(params[rank][i] == Approx(reference_params[i]).margin(1e-5));
    for (int step = 0; step < kSteps; ++step) CHECK(losses[rank][step] == Approx(reference_loss[step]).epsilon(1e-5));
  }
}
