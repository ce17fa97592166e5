// The shared-memory communicator (members as threads of this process: the
// segment, its futex barrier and its deadlines are the same as between
// processes) and the hierarchical communicator (2 "machines" x 2 ranks: shared
// memory within each, Gloo over TCP between the leaders). Exact results of every
// collective, across chunk boundaries; a member that never comes is a
// TimeoutError, one that leaves is PeerLost for the others; no segment is left in
// /dev/shm.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/shm_communicator.h"
#include "core/error.h"
#include "core/sha256.h"
#include "rendezvous/store.h"
#include "support/rank_threads.h"

using namespace dtrain;
using namespace dtrain::comm;

namespace {

using test::check_all_ok;
using test::compare_exact;

// Rank r's value at i: small integers, so sums are exact in any order.
float value(int rank, size_t i) { return static_cast<float>((i % 100) + 7 * rank); }

// Whether the segment of the group keyed `prefix` (job "shm-test") is in /dev/shm.
bool segment_left(const std::string& prefix) {
  return std::filesystem::exists("/dev/shm/dtrain-" + sha256_hex("shm-test|" + prefix).substr(0, 24));
}

ShmOptions shm_options(int rank, int size, const std::string& prefix) {
  ShmOptions o;
  o.rank = rank;
  o.size = size;
  o.prefix = prefix;
  o.job_id = "shm-test";
  o.timeout_seconds = 10.0;
  o.capacity_floats = 7;  // tiny slots: every collective below goes in several chunks
  return o;
}

}  // namespace

TEST_CASE("shared memory: all_reduce, broadcast, all_gather, reduce_scatter and barrier are exact, in chunks") {
  for (const int n : {2, 3}) {
    rendezvous::InMemoryStore store;
    check_all_ok(test::run_on_threads(n, [&](int rank) -> std::string {
      auto comm = make_shm_communicator(store, shm_options(rank, n, "comm/shm" + std::to_string(n) + "/"));
      constexpr size_t kCount = 30;  // 5 chunks of at most 7
      std::vector<float> x(kCount), sum(kCount), mean(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        x[i] = value(rank, i);
        for (int r = 0; r < n; ++r) sum[i] += value(r, i);
        mean[i] = sum[i] / static_cast<float>(n);
      }
      std::vector<float> y = x;
      comm->all_reduce(x.data(), kCount, ReduceOp::kSum);
      std::string problem = compare_exact(x, sum, "all_reduce sum");
      comm->all_reduce(y.data(), kCount, ReduceOp::kMean);
      problem += compare_exact(y, mean, "all_reduce mean");
      for (int root = 0; root < n; ++root) {
        std::vector<float> b(kCount);
        for (size_t i = 0; i < kCount; ++i) b[i] = value(rank, i);
        comm->broadcast(b.data(), kCount, root);
        std::vector<float> expected(kCount);
        for (size_t i = 0; i < kCount; ++i) expected[i] = value(root, i);
        problem += compare_exact(b, expected, "broadcast from " + std::to_string(root));
      }
      std::vector<float> mine(4, static_cast<float>(rank + 1)), gathered(4 * n), expected_gather;
      comm->all_gather(mine.data(), 4, gathered.data());
      for (int r = 0; r < n; ++r) expected_gather.insert(expected_gather.end(), 4, static_cast<float>(r + 1));
      problem += compare_exact(gathered, expected_gather, "all_gather");
      std::vector<float> parts(3 * n), part(3);
      for (size_t i = 0; i < parts.size(); ++i) parts[i] = value(rank, i);
      comm->reduce_scatter(parts.data(), 3, part.data(), ReduceOp::kSum);
      std::vector<float> expected_part(3);
      for (size_t i = 0; i < 3; ++i)
        for (int r = 0; r < n; ++r) expected_part[i] += value(r, 3 * rank + i);
      problem += compare_exact(part, expected_part, "reduce_scatter");
      comm->barrier();
      if (segment_left("comm/shm" + std::to_string(n) + "/")) problem += "the segment is still in /dev/shm";
      return problem;  // (unlinked once every member had mapped it)
    }));
  }
}

// Two barriers a chunk: a member writes its slot for the next collective while
// the others may still be reading the last result. Back-to-back collectives with
// uneven pacing (rank 0 yields) must still be exact every time.
TEST_CASE("shared memory: back-to-back all_reduces and broadcasts stay exact when the members run unevenly") {
  rendezvous::InMemoryStore store;
  check_all_ok(test::run_on_threads(3, [&](int rank) -> std::string {
    auto comm = make_shm_communicator(store, shm_options(rank, 3, "comm/shm-paced/"));
    constexpr size_t kCount = 23;  // 4 chunks, the last one short
    std::string problem;
    for (int round = 0; round < 300 && problem.empty(); ++round) {
      if (rank == 0 && round % 3 == 0) std::this_thread::yield();
      std::vector<float> x(kCount), sum(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        x[i] = value(rank, i + static_cast<size_t>(round));
        for (int r = 0; r < 3; ++r) sum[i] += value(r, i + static_cast<size_t>(round));
      }
      comm->all_reduce(x.data(), kCount, ReduceOp::kSum);
      problem += compare_exact(x, sum, "all_reduce in round " + std::to_string(round));
      const int root = round % 3;
      std::vector<float> b(kCount), expected(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        b[i] = value(rank, i + 1);
        expected[i] = value(root, i + 1);
      }
      comm->broadcast(b.data(), kCount, root);
      problem += compare_exact(b, expected, "broadcast in round " + std::to_string(round));
    }
    return problem;
  }));
}

TEST_CASE("shared memory: a member that never comes is a TimeoutError, one that leaves is PeerLost") {
  rendezvous::InMemoryStore store;
  ShmOptions lonely = shm_options(0, 2, "comm/lonely/");
  lonely.timeout_seconds = 0.5;
  CHECK_THROWS_AS(make_shm_communicator(store, lonely), TimeoutError);
  CHECK_FALSE(segment_left("comm/lonely/"));  // the segment it made is gone too

  rendezvous::InMemoryStore store2;
  std::vector<std::string> outcome(2);
  test::run_on_threads(2, [&](int rank) -> std::string {
    auto comm = make_shm_communicator(store2, shm_options(rank, 2, "comm/leaving/"));
    if (rank == 1) return "";  // leaves: its communicator is destroyed
    std::vector<float> x(3, 1.0f);
    try {
      for (int i = 0; i < 100; ++i) comm->all_reduce(x.data(), x.size(), ReduceOp::kSum);
      outcome[0] = "no error";
    } catch (const PeerLost&) {
      outcome[0] = "PeerLost";
    } catch (const TimeoutError&) {
      outcome[0] = "TimeoutError";
    }
    return "";
  });
  CHECK(outcome[0] == "PeerLost");
}

TEST_CASE("hierarchical: 2 machines x 2 ranks reduce and broadcast exactly (shared memory inside, Gloo between)") {
  const HostLayout layout = HostLayout::from_keys({"a", "b", "a", "b"});  // ranks 0 and 2 share machine a
  REQUIRE(layout.hosts() == 2);
  CHECK(layout.host_of == std::vector<int>{0, 1, 0, 1});
  CHECK(layout.local_rank_of == std::vector<int>{0, 0, 1, 1});
  rendezvous::InMemoryStore store;
  constexpr int kRanks = 4;
  check_all_ok(test::run_on_threads(kRanks, [&](int rank) -> std::string {
    const int host = layout.host_of[rank];
    auto local = make_shm_communicator(
        store, shm_options(layout.local_rank_of[rank], 2, "comm/h/host" + std::to_string(host) + "/"));
    std::unique_ptr<Communicator> leaders;
    if (layout.local_rank_of[rank] == 0) {
      GlooOptions g;
      g.rank = host;
      g.size = 2;
      g.prefix = "comm/h/leaders/";
      g.timeout_seconds = 10.0;
      leaders = make_gloo_communicator(store, g);
    }
    auto comm = make_hierarchical_communicator(rank, layout, std::move(local), std::move(leaders));
    if (comm->rank() != rank || comm->size() != kRanks) return "wrong rank or size";
    constexpr size_t kCount = 20;
    std::vector<float> x(kCount), sum(kCount), mean(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      x[i] = value(rank, i);
      for (int r = 0; r < kRanks; ++r) sum[i] += value(r, i);
      mean[i] = sum[i] / kRanks;
    }
    std::vector<float> y = x;
    comm->all_reduce(x.data(), kCount, ReduceOp::kSum);
    std::string problem = compare_exact(x, sum, "all_reduce");
    comm->all_reduce(y.data(), kCount, ReduceOp::kMean);
    problem += compare_exact(y, mean, "all_reduce mean");
    for (int root = 0; root < kRanks; ++root) {
      std::vector<float> b(kCount), expected(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        b[i] = value(rank, i);
        expected[i] = value(root, i);
      }
      comm->broadcast(b.data(), kCount, root);
      problem += compare_exact(b, expected, "broadcast from " + std::to_string(root));
    }
    comm->barrier();
    return problem;
  }));
}
