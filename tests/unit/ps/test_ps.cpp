// Parameter servers: the partitioners and the placement rule; a ps task's service
// on real TCP loopback with two workers on threads, whose sync mode follows
// multi_worker_mirrored's per-step loss; a client that is no dtrain task is
// dropped while the job goes on.
#include <asio.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "comm/gloo_communicator.h"
#include "core/error.h"
#include "core/rng.h"
#include "job/job_config.h"
#include "ps/ps_server.h"
#include "rendezvous/store.h"
#include "strategy/parameter_server.h"
#include "strategy/registry.h"
#include "support/rank_threads.h"
#include "support/tiny_dense_job.h"

using namespace dtrain;

namespace {

job::JobConfig job_of(const std::string& strategy, const std::string& extra = "") {
  return test::tiny_dense_job(strategy, extra);
}

// Three batches in turn: the model can learn them.
data::Batch batch(int64_t step, int64_t first, int64_t rows) { return test::tiny_dense_batch(step % 3, first, rows); }

ps::PartitionerSpec fixed(int64_t n) {
  ps::PartitionerSpec p;
  p.type = ps::PartitionerSpec::Type::kFixed;
  p.num_shards = n;
  return p;
}

const rendezvous::Credentials kCredentials{"ps-test", "a secret"};

}  // namespace

TEST_CASE("partitioners cut along the first axis as TF's do") {
  ps::PartitionerSpec min_size;
  min_size.type = ps::PartitionerSpec::Type::kMinSize;
  min_size.min_shard_bytes = 1000;
  min_size.max_shards = 3;
  CHECK(ps::num_partitions(min_size, {100, 10}) == 3);  // 4000 bytes: 4 shards of >= 1000, capped at 3
  CHECK(ps::num_partitions(min_size, {10, 10}) == 1);   // 400 bytes
  ps::PartitionerSpec max_size;
  max_size.type = ps::PartitionerSpec::Type::kMaxSize;
  max_size.max_shard_bytes = 1000;
  CHECK(ps::num_partitions(max_size, {100, 10}) == 4);  // ceil(4000 / 1000)
  CHECK(ps::num_partitions(max_size, {2, 1000}) == 2);  // never more parts than rows
  CHECK(ps::num_partitions(fixed(3), {7, 2}) == 3);
  const ps::Placement plan = ps::plan_placement({{"k", {7, 2}, true}}, 2, fixed(3));
  REQUIRE(plan.shards.size() == 3);
  // 7 rows in 3 parts: 3, 2, 2 (the first rows % parts parts take one more).
  CHECK(plan.shards[0].count == 6);
  CHECK(plan.shards[1].offset == 6);
  CHECK(plan.shards[2].offset == 10);
  CHECK(plan.shards[2].count == 4);
}

TEST_CASE("placement balances bytes: largest first, onto the ps with the fewest") {
  const ps::Placement plan =
      ps::plan_placement({{"a", {100}, true}, {"b", {60}, true}, {"c", {50}, true}, {"d", {10}, false}}, 2, {});
  CHECK(plan.ps_elements(0) == 110);  // a + d
  CHECK(plan.ps_elements(1) == 110);  // b + c
  CHECK(plan.shards[0].ps == 0);
  CHECK(plan.shards[1].ps == 1);
  CHECK(plan.shards[2].ps == 1);
  CHECK(plan.shards[3].ps == 0);
}

TEST_CASE("sync mode on two ps tasks over TCP follows multi_worker_mirrored's per-step loss for 20 steps") {
  constexpr int kSteps = 20;
  // The reference: multi_worker_mirrored on two ranks, rank r on rows 4r..4r+3.
  std::vector<double> reference(kSteps, 0.0);
  {
    rendezvous::InMemoryStore store;
    std::vector<std::vector<double>> sums(2, std::vector<double>(kSteps));
    test::check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
      comm::GlooOptions o;
      o.rank = rank;
      o.size = 2;
      o.timeout_seconds = 30.0;
      auto workers = comm::make_gloo_communicator(store, o);
      const job::JobConfig mwm = job_of("multi_worker_mirrored");
      auto s = strategy::make_strategy(mwm.strategy_job(), {workers.get(), 1});
      for (int step = 0; step < kSteps; ++step) {
        nn::LossStats stats;
        s->train_step({batch(step, 4 * rank, 4)}, step, stats);
        sums[rank][step] = stats.loss_sum / static_cast<double>(stats.count);
      }
      return "";
    }));
    reference = sums[0];
  }

  const job::JobConfig job = job_of("parameter_server", R"(, "mode": "sync", "variable_partitioner": {"type": "fixed", "num_shards": 2})");
  const ps::Placement plan = ps::plan_placement(ps::model_variables(job.model, job.train.seed), 2, job.strategy.partitioner);
  std::vector<std::unique_ptr<ps::ShardStore>> shards;
  std::vector<std::unique_ptr<ps::PsServer>> servers;
  std::vector<std::string> addresses;
  for (int p = 0; p < 2; ++p) {
    shards.push_back(std::make_unique<ps::ShardStore>(plan, p, job.model, job.train.seed, job.optimizer));
    ps::PsServerOptions o;
    o.credentials = kCredentials;
    o.task = "ps:" + std::to_string(p);
    o.mode = ps::UpdateMode::kSync;
    o.workers = {"worker:0", "worker:1"};
    servers.push_back(std::make_unique<ps::PsServer>(*shards.back(), o, -1, "127.0.0.1", 0));
    addresses.push_back("127.0.0.1:" + std::to_string(servers.back()->port()));
  }
  std::vector<std::vector<double>> losses(2, std::vector<double>(kSteps));
  test::check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
    ps::PsClientOptions o;
    o.credentials = kCredentials;
    o.task = "worker:" + std::to_string(rank);
    o.request_timeout = 30.0;
    ps::PsGroup group(plan, addresses, o);
    auto s = strategy::make_strategy(job.strategy_job(), {nullptr, 1, Device::cpu(), &group});
    for (int step = 0; step < kSteps; ++step) {
      nn::LossStats stats;
      s->train_step({batch(step, 4 * rank, 4)}, step, stats);
      losses[rank][step] = stats.loss_sum;  // this worker's half of the global batch's sum
    }
    static_cast<strategy::ParameterServerStrategy&>(*s).drain();
    group.bye();
    return "";
  }));
  CHECK(servers[0]->version() == kSteps);
  CHECK(servers[1]->version() == kSteps);
  for (int step = 0; step < kSteps; ++step) {
    INFO("step " << step);
    CHECK((losses[0][step] + losses[1][step]) / 8.0 == Approx(reference[step]).epsilon(1e-4));
  }
}

TEST_CASE("a client that is no dtrain task is dropped by a ps, which goes on serving") {
  const job::JobConfig job = job_of("parameter_server");
  const ps::Placement plan = ps::plan_placement(ps::model_variables(job.model, job.train.seed), 1, {});
  ps::ShardStore shards(plan, 0, job.model, job.train.seed, job.optimizer);
  ps::PsServerOptions o;
  o.credentials = kCredentials;
  o.workers = {"worker:0"};
  o.handshake_timeout = 1.0;
  ps::PsServer server(shards, o, -1, "127.0.0.1", 0);
  {
    asio::io_context io;
    asio::ip::tcp::socket hostile(io);
    hostile.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(server.port())});
    const std::string junk(64, '\xff');  // a huge frame length, then garbage
    asio::write(hostile, asio::buffer(junk));
    char c;
    std::error_code ec;
    hostile.read_some(asio::buffer(&c, 1), ec);  // the ps closes the connection
    CHECK(ec);
  }
  CHECK(server.rejected_connections() == 1);
  ps::PsClientOptions wrong;
  wrong.credentials = {"ps-test", "another secret"};
  wrong.task = "worker:0";
  wrong.connect_timeout = 2.0;
  CHECK_THROWS_AS(ps::PsGroup(plan, {"127.0.0.1:" + std::to_string(server.port())}, wrong), ConfigError);
  ps::PsClientOptions right = wrong;
  right.credentials = kCredentials;
  ps::PsGroup group(plan, {"127.0.0.1:" + std::to_string(server.port())}, right);
  std::vector<std::vector<float>> values;
  group.start_pull();
  CHECK(group.finish(values) == 0);
  CHECK(values[0].size() == static_cast<size_t>(shards.elements()));
}
