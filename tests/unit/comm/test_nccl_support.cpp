// The NCCL communicator's GPU-free logic, on any machine: NCCL's unique id from
// rank 0 to the others through the chief's store over real TCP (and its
// deadline when rank 0 never publishes), the polling wait (finished, backend
// error, lost peer, deadline: never longer than the deadline), the failures'
// error types, NCCL's error texts, and strategy.communication nccl in the job
// file (accepted for GPU jobs in builds with NCCL, exit 2 otherwise).
#include <catch2/catch.hpp>
#include <string>

#include "comm/nccl/nccl_support.h"
#include "core/error.h"
#include "core/timer.h"
#include "job/job_config.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"
#include "support/rank_threads.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

rendezvous::ServerOptions two_task_server() {
  rendezvous::ServerOptions o;
  o.credentials = {"job-nccl", "s3cret"};
  o.tasks = {{"worker:0", "127.0.0.1:1"}, {"worker:1", "127.0.0.1:2"}};
  o.chief = "worker:0";
  return o;
}

rendezvous::ClientOptions client(const std::string& task) {
  rendezvous::ClientOptions o;
  o.credentials = {"job-nccl", "s3cret"};
  o.task = task;
  o.connect_timeout = 5.0;
  o.request_timeout = 5.0;
  return o;
}

// A fake NCCL id: 128 bytes with every byte value, zeros included.
std::string fake_id() {
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>((i * 37 + 5) % 256);
  return id;
}

job::JobConfig job_with(const std::string& device, const std::string& communication) {
  return job::parse_job_config(R"({"device": ")" + device + R"(",
    "strategy": {"type": "multi_worker_mirrored", "communication": ")" + communication + R"("},
    "model": {"input_shape": [6], "layers": [{"type": "Dense", "units": 3}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "data": {"train": {"format": "synthetic", "shape": [6], "count": 16, "classes": 3}},
    "train": {"batch_size_per_replica": 4}})",
                               "job.json");
}

}  // namespace

TEST_CASE("nccl: rank 0's unique id reaches the other rank through the store over TCP, bytes intact") {
  rendezvous::StoreServer server("127.0.0.1", 0, two_task_server());
  std::vector<std::string> got(2);
  test::check_all_ok(test::run_on_threads(2, [&](int rank) {
    rendezvous::StoreClient store("127.0.0.1", server.port(), client(rank == 0 ? "worker:0" : "worker:1"));
    int made = 0;
    got[static_cast<size_t>(rank)] = comm::share_unique_id(store, "comm/nccl/unique_id", rank, 10.0,
                                                           [&] { ++made; return fake_id(); }, "test");
    if (made != (rank == 0 ? 1 : 0)) return std::string("make_id ran on a rank other than 0, or twice");
    return std::string();
  }));
  CHECK(got[0] == fake_id());
  CHECK(got[1] == fake_id());
}

TEST_CASE("nccl: a rank whose rank 0 never publishes the id gives up at its deadline naming the key") {
  rendezvous::InMemoryStore store;
  Stopwatch watch;
  CHECK_THROWS_AS(comm::share_unique_id(store, "comm/x/unique_id", 1, 0.3, [] { return fake_id(); }, "test"),
                  TimeoutError);
  CHECK(watch.seconds() < 3.0);
  CHECK_THROWS_WITH(comm::share_unique_id(store, "comm/x/unique_id", 1, 0.05, [] { return fake_id(); }, "test"),
                    Contains("store key 'comm/x/unique_id'") && Contains("rank 0 did not start"));
  store.set("comm/y/unique_id", "not hex!");
  CHECK_THROWS_AS(comm::share_unique_id(store, "comm/y/unique_id", 1, 1.0, [] { return fake_id(); }, "test"),
                  CommError);
}

TEST_CASE("nccl: the wait returns when finished, else reports the backend, a lost peer or the deadline") {
  int polls = 0;
  comm::CollectivePoll poll;
  poll.finished = [&] { return ++polls >= 50; };
  poll.backend_error = [] { return std::optional<std::string>(); };
  CHECK_FALSE(comm::poll_until_finished("ncclAllReduce", poll, 5.0).has_value());
  CHECK(polls == 50);

  poll.finished = [] { return false; };
  poll.backend_error = [] { return std::optional<std::string>("NCCL error: remote process exited"); };
  auto failure = comm::poll_until_finished("ncclAllReduce", poll, 5.0);
  REQUIRE(failure);
  CHECK(failure->kind == comm::CommFailure::Kind::kBackend);
  CHECK_THAT(failure->message, Contains("ncclAllReduce failed: NCCL error: remote process exited"));

  // A peer that never calls the collective: the heartbeats say it is lost after a while.
  poll.backend_error = [] { return std::optional<std::string>(); };
  Stopwatch watch;
  poll.peer_lost = [&]() -> std::optional<std::string> {
    if (watch.seconds() < 0.2) return std::nullopt;
    return std::string("task worker:1 (127.0.0.1:2) was lost at step 3");
  };
  failure = comm::poll_until_finished("ncclAllReduce on rank 0", poll, 30.0);
  REQUIRE(failure);
  CHECK(failure->kind == comm::CommFailure::Kind::kPeerLost);
  CHECK_THAT(failure->message, Contains("worker:1") && Contains("ncclAllReduce on rank 0 was aborted"));
  CHECK(watch.seconds() < 2.0);  // at once, not at the 30 s deadline
  CHECK_THROWS_AS(failure->raise(), PeerLost);

  poll.peer_lost = nullptr;
  watch.reset();
  failure = comm::poll_until_finished("ncclBroadcast", poll, 0.3);
  REQUIRE(failure);
  CHECK(failure->kind == comm::CommFailure::Kind::kTimeout);
  CHECK(watch.seconds() >= 0.3);
  CHECK(watch.seconds() < 1.5);
  CHECK_THAT(failure->message, Contains("ncclBroadcast did not finish within 0.3 s"));
  CHECK_THROWS_AS(failure->raise(), TimeoutError);
  CHECK_THROWS_AS((comm::CommFailure{comm::CommFailure::Kind::kBackend, "x"}.raise()), CommError);
}

TEST_CASE("nccl: error messages carry NCCL's error string, its code and its last error") {
  CHECK(comm::nccl_error_message("ncclCommInitRankConfig", 2, "unhandled system error", "socket connect failed",
                                 "the workers' NCCL communicator (rank 1 of 2, cuda:0)") ==
        "NCCL error in ncclCommInitRankConfig on the workers' NCCL communicator (rank 1 of 2, cuda:0): unhandled "
        "system error (ncclResult_t 2): socket connect failed");
  CHECK(comm::nccl_error_message("ncclAllReduce", 5, "invalid usage", "", "x") ==
        "NCCL error in ncclAllReduce on x: invalid usage (ncclResult_t 5)");
}

TEST_CASE("nccl: strategy.communication nccl is for GPU jobs in builds with NCCL, exit 2 otherwise") {
  // A CPU job: refused in every build, saying what to change.
  try {
    job_with("cpu", "nccl");
    FAIL("a CPU job with communication nccl was accepted");
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    if (comm::kNcclBuilt)
      CHECK_THAT(message, Contains("job.json: strategy.communication: 'nccl' reduces device (GPU) buffers, and this "
                                   "job's device is cpu; set \"device\": \"gpu\""));
    else
      CHECK_THAT(message, Contains("job.json: strategy.communication: 'nccl' needs a build of dtrain with NCCL"));
  }
  if (comm::kNcclBuilt) {
    CHECK(job_with("gpu", "nccl").strategy.communication == strategy::Communication::kNccl);
    CHECK(job_with("cuda:1", "nccl").strategy.communication == strategy::Communication::kNccl);
    CHECK(job_with("auto", "nccl").strategy.communication == strategy::Communication::kNccl);
  } else {
    CHECK_THROWS_WITH(job_with("gpu", "nccl"), Contains("rebuild with -DDTRAIN_CUDA=ON"));
  }
  CHECK(job_with("cpu", "auto").strategy.communication == strategy::Communication::kAuto);
}
