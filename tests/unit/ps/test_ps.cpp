// Parameter servers: the partitioners and the placement rule; a ps task's service
// on real TCP loopback with two workers on threads, whose sync mode follows
// multi_worker_mirrored's per-step loss; checkpoints each ps writes its own shards
// of, loaded back whole and onto another number of ps; a client that is no dtrain
// task, or asks for a save outside the checkpoint directory, is dropped while the
// job goes on; gradient clipping on the worker over whole variables.
#include <asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo/gloo_communicator.h"
#include "core/error.h"
#include "core/rng.h"
#include "job/job_config.h"
#include "checkpoint/checkpoint_store.h"
#include "ps/ps_server.h"
#include "ps/ps_wire.h"
#include "ps/work_queue.h"
#include "rendezvous/store.h"
#include "strategy/parameter_server.h"
#include "strategy/registry.h"
#include "support/gloo_rank.h"
#include "support/rank_threads.h"
#include "support/temp_dir.h"
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

ps::PsClientOptions client(const std::string& task) {
  ps::PsClientOptions o;
  o.credentials = kCredentials;
  o.task = task;
  o.request_timeout = 30.0;
  return o;
}

// The ps tasks of `plan` on loopback (async), writing checkpoints into `checkpoint_dir`.
struct LocalPs {
  std::vector<std::unique_ptr<ps::ShardStore>> shards;
  std::vector<std::unique_ptr<ps::PsServer>> servers;
  std::vector<std::string> addresses;
  LocalPs(const ps::Placement& plan, const job::JobConfig& job, const std::string& checkpoint_dir) {
    for (int p = 0; p < plan.num_ps; ++p) {
      shards.push_back(std::make_unique<ps::ShardStore>(plan, p, job.model, job.train.seed, job.optimizer));
      ps::PsServerOptions o;
      o.credentials = kCredentials;
      o.task = "ps:" + std::to_string(p);
      o.workers = {"worker:0"};
      o.checkpoint_dir = checkpoint_dir;
      servers.push_back(std::make_unique<ps::PsServer>(*shards.back(), o, -1, "127.0.0.1", 0));
      addresses.push_back("127.0.0.1:" + std::to_string(servers.back()->port()));
    }
  }
};

// Every tensor of `params` equals the one of the same name and shape in `file`, bit for bit.
void check_same_tensors(const std::vector<nn::Param*>& params, const checkpoint::SafetensorsFile& file) {
  CHECK(file.tensors.size() == params.size());
  for (const nn::Param* p : params) {
    INFO(p->name);
    const Tensor* t = file.find(p->name);
    REQUIRE(t != nullptr);
    REQUIRE(t->shape() == p->value.shape());
    CHECK(std::memcmp(t->data(), p->value.data(), p->value.bytes()) == 0);
  }
}

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
      auto workers = test::gloo_rank(store, rank, 2);
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

TEST_CASE("each of two ps writes its own shards into a checkpoint, which loads back whole and onto one ps") {
  test::TempDir tmp;
  const std::string dir = tmp.file("ckpts");
  const job::JobConfig job = job_of("parameter_server", R"(, "variable_partitioner": {"type": "fixed", "num_shards": 2})");
  const ps::Placement two = ps::plan_placement(ps::model_variables(job.model, job.train.seed), 2, job.strategy.partitioner);
  LocalPs servers(two, job, dir);
  ps::PsGroup group(two, servers.addresses, client("worker:0"));
  auto s = strategy::make_strategy(job.strategy_job(), {nullptr, 1, Device::cpu(), &group});
  auto& trained = static_cast<strategy::ParameterServerStrategy&>(*s);
  for (int step = 0; step < 5; ++step) {
    nn::LossStats stats;
    s->train_step({batch(step, 0, 4)}, step, stats);
  }
  trained.drain();

  checkpoint::CheckpointStore store(dir);
  checkpoint::Manifest m;
  m.step = 5;
  m.sharded = trained.checkpoint_layout();
  const std::string path = store.save_sharded(m, [&](const std::string& tmp_dir) { return group.save(tmp_dir, 5); });
  CHECK(std::filesystem::exists(path + "/ps-00000-of-00002.safetensors"));
  CHECK(std::filesystem::exists(path + "/ps-00001-of-00002.safetensors"));
  CHECK_FALSE(std::filesystem::exists(path + "/model.safetensors"));
  // Each file holds only its ps's shards (values and both Adam slots).
  const checkpoint::SafetensorsFile part = checkpoint::read_safetensors(path + "/ps-00001-of-00002.safetensors");
  CHECK(part.tensors.size() == 3 * two.ps_shards[1].size());
  REQUIRE(part.find("dense/kernel/part_1") != nullptr);
  CHECK(part.find("dense/kernel/part_1")->shape() == Shape{3, 8});  // rows 3..5 of the [6, 8] kernel
  CHECK(part.find("dense/kernel/part_1/m") != nullptr);
  CHECK(part.metadata.at("dtrain_ps") == "1 of 2");

  trained.sync_state();  // the ps tasks' values and slots into the local model and optimizer
  const checkpoint::LoadedCheckpoint c = checkpoint::CheckpointStore::load(path);
  check_same_tensors(trained.model().params(), c.model);
  check_same_tensors(trained.optimizer().state(), c.optimizer);

  // Onto one ps with unsplit variables: the same values and slots come back from it.
  const ps::Placement one = ps::plan_placement(ps::model_variables(job.model, job.train.seed), 1, {});
  LocalPs single(one, job, dir);
  ps::PsGroup single_group(one, single.addresses, client("chief:0"));
  auto s1 = strategy::make_strategy(job.strategy_job(), {nullptr, 1, Device::cpu(), &single_group});
  auto& resumed = static_cast<strategy::ParameterServerStrategy&>(*s1);
  s1->load_state([&](const std::string& n) { return c.model.find(n); },
                 [&](const std::string& n) { return c.optimizer.find(n); });
  resumed.assign_to_ps(5);
  for (nn::Param* p : resumed.model().params()) p->value.zero();  // what comes back must come from the ps
  resumed.sync_state();
  CHECK(single.servers[0]->version() == 5);
  check_same_tensors(resumed.model().params(), c.model);
  check_same_tensors(resumed.optimizer().state(), c.optimizer);
}

TEST_CASE("gradient clipping under parameter_server: the worker clips whole variables, the ps does not clip shards") {
  // rmsprop (three slots) with a global_clipnorm small enough to act, on variables
  // split in two shards over two ps: one async worker must follow one_device.
  job::JobConfig job = job_of("parameter_server", R"(, "variable_partitioner": {"type": "fixed", "num_shards": 2})");
  job.optimizer.type = &optim::optimizer_type("rmsprop");
  job.optimizer.learning_rate.initial_learning_rate = 0.01;
  job.optimizer.momentum = 0.5;
  job.optimizer.centered = true;
  for (const char* clip : {"clipnorm", "global_clipnorm"}) {
    CAPTURE(clip);
    job.optimizer.clipnorm = std::string(clip) == "clipnorm" ? 0.05 : 0.0;
    job.optimizer.global_clipnorm = std::string(clip) == "global_clipnorm" ? 0.05 : 0.0;
    job::JobConfig one_job = job_of("one_device");
    one_job.optimizer = job.optimizer;
    auto one = strategy::make_strategy(one_job.strategy_job(), {nullptr, 1});
    const ps::Placement plan = ps::plan_placement(ps::model_variables(job.model, job.train.seed), 2, job.strategy.partitioner);
    test::TempDir tmp;
    LocalPs servers(plan, job, tmp.file("ckpts"));
    ps::PsGroup group(plan, servers.addresses, client("worker:0"));
    auto s = strategy::make_strategy(job.strategy_job(), {nullptr, 1, Device::cpu(), &group});
    for (int step = 0; step < 10; ++step) {
      INFO("step " << step);
      nn::LossStats want, got;
      one->train_step({batch(step, 0, 4)}, step, want);
      s->train_step({batch(step, 0, 4)}, step, got);
      CHECK(got.loss_sum == Approx(want.loss_sum).epsilon(1e-5));
    }
    static_cast<strategy::ParameterServerStrategy&>(*s).drain();
    group.bye();
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
  // It hung up after the challenge: a failed proof, recorded for the name it
  // claimed; nothing else changes (the ps still has not applied a thing).
  for (int i = 0; i < 100 && server.rejected_connections() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(server.rejected_connections() == 2);
  CHECK(server.version() == 0);
  ps::PsClientOptions right = wrong;
  right.credentials = kCredentials;
  ps::PsGroup group(plan, {"127.0.0.1:" + std::to_string(server.port())}, right);
  std::vector<std::vector<float>> values;
  group.start_pull();
  CHECK(group.finish(values) == 0);
  CHECK(values[0].size() == static_cast<size_t>(shards.elements()));

  // A task of the job that asks for a save outside a checkpoint's temporary directory is dropped too.
  ps::PsChannel channel("127.0.0.1:" + std::to_string(server.port()), "ps:0", right);
  const std::string escape = "../../etc";
  channel.send(ps::PsOp::kSave, 1, escape.data(), escape.size());
  char digest[64];
  CHECK_THROWS_AS(channel.receive(ps::PsOp::kSaved, digest, sizeof digest), PeerLost);
  CHECK(server.rejected_connections() == 3);
  // This ps has no checkpoint directory: a save is refused with the reason.
  CHECK_THROWS_WITH(group.save("/somewhere/.tmp-ckpt-00000001-abcd", 1),
                    Catch::Contains("has no checkpoint directory"));
  CHECK(server.version() == 0);
}

// tests/fuzz/fuzz_ps_wire.cpp feeds these the headers and payloads a peer sends.
TEST_CASE("ps request and reply headers are checked before their payload is read") {
  const ps::PsLimits limits{12, 32};
  auto header = [](ps::PsOp op, uint64_t bytes) { return ps::PsHeader{static_cast<uint32_t>(op), 0, 0, 0, bytes}; };
  CHECK(ps::request_header_problem(header(ps::PsOp::kPushPull, 12), limits).empty());
  CHECK(ps::request_header_problem(header(ps::PsOp::kPull, 0), limits).empty());
  CHECK(ps::request_header_problem(header(ps::PsOp::kPushPull, 13), limits) ==
        "sent a push request with 13 payload bytes (at most 12 here)");
  CHECK(ps::request_header_problem(header(ps::PsOp::kPull, 1), limits) ==
        "sent a pull request with 1 payload bytes (at most 0 here)");
  CHECK(ps::request_header_problem(header(ps::PsOp::kSave, UINT64_MAX), limits) ==
        "sent a save request with 18446744073709551615 payload bytes (at most 255 here)");
  CHECK(ps::request_header_problem({99, 0, 0, 0, 0}, limits) == "sent an unknown request (op 99)");
  CHECK(ps::request_header_problem(header(ps::PsOp::kValues, 0), limits) == "sent an unknown request (op 20)");
  CHECK(ps::reply_header_problem(header(ps::PsOp::kValues, 12), ps::PsOp::kValues, 12).empty());
  CHECK(ps::reply_header_problem({77, 0, 0, 0, 5}, ps::PsOp::kOk, 0) ==
        "sent a 'unknown' reply of 5 bytes where 'ok' of 0 was due");
  CHECK(ps::save_name_problem(".tmp-ckpt-00000001-ab").empty());
  CHECK(ps::save_name_problem("../x\x1b[2J") ==
        "asked to save into '../x\\x1b[2J', which is not a checkpoint's temporary directory");
  CHECK_FALSE(ps::save_name_problem(std::string(".tmp-ckpt-\0", 11)).empty());
  CHECK(ps::error_reply_text("could not\x07 write") == "could not\\x07 write");
  CHECK(ps::error_reply_text(std::string(5000, 'e')).size() == ps::kMaxErrorBytes + 3);
}

TEST_CASE("a unit whose worker died between its ticket and its claim goes back to the queue") {
  rendezvous::InMemoryStore store;
  ps::WorkQueue coordinator(store, {/*epochs=*/1, /*steps_per_epoch=*/4, /*steps_per_unit=*/1});
  coordinator.open(0);
  ps::WorkQueue worker0(store, coordinator.plan()), worker1(store, coordinator.plan());
  const auto nothing = [] {};
  REQUIRE(worker0.take("worker:0#1", nothing)->id == 0);
  // worker:1 takes the ticket for unit 1 and is killed before it records itself as owner.
  REQUIRE(store.add("ps/work/next", 1) == 2);
  CHECK(coordinator.requeue_units_of("worker:1#1") == 0);  // owns nothing on record
  CHECK(worker1.take("worker:2#1", nothing)->id == 2);     // a live worker meanwhile
  CHECK(coordinator.requeue_orphans(60.0) == 0);           // too early to tell it from a slow claim
  CHECK(coordinator.requeue_orphans(0.0) == 1);            // still unowned: requeued
  CHECK(coordinator.requeue_orphans(0.0) == 0);            // once
  CHECK(worker0.take("worker:0#1", nothing)->id == 1);     // requeued units go first
  CHECK(worker0.take("worker:0#1", nothing)->id == 3);
}
