// The shared-memory communicator (members as threads of this process: the
// segment, its futex barrier and its deadlines are the same as between
// processes) and the hierarchical communicator (2 "machines" x 2 ranks: shared
// memory within each, Gloo over TCP between the leaders). Exact results of every
// collective, across chunk boundaries; a member that never comes is a
// TimeoutError, one that leaves is PeerLost for the others, one that stalls is
// PeerLost once the heartbeats' check says so; no segment is left in
// /dev/shm. all_reduce_pieces in place (shared memory, through the recorder and a
// borrowed handle, and a one-machine hierarchical group) and through one buffer
// (two machines); kMean's multiplication by an exact 1/size.
#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/flight_recorder.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/reduction.h"
#include "comm/shm/shm_communicator.h"
#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "rendezvous/store.h"
#include "support/rank_threads.h"

using namespace dtrain;
using namespace dtrain::comm;

namespace {

using test::check_all_ok;
using test::compare_exact;
using Catch::Contains;

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

// Pieces of 5, 0, 9, 1 and 11 values (26 in all: 4 chunks of at most 7, pieces
// crossing chunk boundaries, an empty piece), rank r's value at i of the whole
// value(r, i + shift); then all_reduce_pieces(op) must give every piece its part
// of the reduction over `size` ranks. Returns the problem, "" if none.
std::string check_pieces(Communicator& comm, int rank, int size, ReduceOp op, size_t shift) {
  const std::vector<size_t> lengths = {5, 0, 9, 1, 11};
  std::vector<std::vector<float>> storage;
  std::vector<Piece> pieces;
  size_t i = 0;
  for (const size_t length : lengths) {
    storage.emplace_back(length);
    for (float& v : storage.back()) v = value(rank, shift + i++);
  }
  for (auto& part : storage) pieces.push_back({part.data(), part.size()});
  comm.all_reduce_pieces(pieces, op);
  std::string problem;
  i = 0;
  for (size_t p = 0; p < storage.size(); ++p) {
    std::vector<float> expected(storage[p].size());
    for (float& e : expected) {
      for (int r = 0; r < size; ++r) e += value(r, shift + i);
      if (op == ReduceOp::kMean) e /= static_cast<float>(size);
      ++i;
    }
    problem += compare_exact(storage[p], expected, "piece " + std::to_string(p) + " (" + reduce_op_name(op) + ")");
  }
  return problem;
}

}  // namespace

TEST_CASE("shared memory: all_reduce_pieces reduces the pieces where they lie, exactly, in chunks") {
  for (const int n : {2, 3}) {
    rendezvous::InMemoryStore store;
    check_all_ok(test::run_on_threads(n, [&](int rank) -> std::string {
      auto shm = make_shm_communicator(store, shm_options(rank, n, "comm/pieces" + std::to_string(n) + "/"));
      if (!shm->reduces_pieces_in_place()) return "shared memory does not reduce pieces in place";
      // The strategy reaches it through the flight recorder, sometimes borrowed: both say so too.
      auto recorded = make_recorded(borrow(*shm), "pieces-test");
      if (!recorded->reduces_pieces_in_place()) return "the recorder or borrow() hides reduces_pieces_in_place";
      std::string problem;
      for (int round = 0; round < 20 && problem.empty(); ++round) {  // back to back, with all_reduce between
        problem += check_pieces(*recorded, rank, n, round % 2 ? ReduceOp::kMean : ReduceOp::kSum, round);
        std::vector<float> x(10, static_cast<float>(rank));
        shm->all_reduce(x.data(), x.size(), ReduceOp::kSum);
        if (x[9] != static_cast<float>(n * (n - 1) / 2)) problem += "all_reduce between pieces";
      }
      if (flight_record().find("pieces-test all_reduce 104 bytes: completed") == std::string::npos)
        problem += "the recorder did not record the pieces' all-reduce (26 floats)";
      return problem;
    }));
  }
}

TEST_CASE("the base class's all_reduce_pieces goes through one buffer: the same values") {
  // A Gloo group does not reduce pieces in place: the default packs, reduces, unpacks.
  rendezvous::InMemoryStore store;
  check_all_ok(test::run_on_threads(3, [&](int rank) -> std::string {
    GlooOptions g;
    g.rank = rank;
    g.size = 3;
    g.prefix = "comm/pieces-gloo/";
    g.timeout_seconds = 10.0;
    auto gloo = make_gloo_communicator(store, g);
    if (gloo->reduces_pieces_in_place()) return "Gloo claims to reduce pieces in place";
    return check_pieces(*gloo, rank, 3, ReduceOp::kSum, 0) + check_pieces(*gloo, rank, 3, ReduceOp::kMean, 1);
  }));
}

TEST_CASE("kMean over a power-of-two group multiplies by 1/size: the same bits as the division") {
  std::mt19937 rng(14);
  std::vector<float> values;
  for (int i = 0; i < 20000; ++i) {  // every exponent, subnormals, signs, and the special values
    uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, sizeof f);
    values.push_back(f);
  }
  for (float f : {0.0f, -0.0f, 1e-45f, -1e-45f, 3e-38f, 1.17549435e-38f, 3.4028235e38f, INFINITY, -INFINITY, 1.0f, 3.0f})
    values.push_back(f);
  for (const int size : {2, 3, 4, 8, 64}) {
    std::vector<float> got = values;
    divide_by_size(got.data(), got.size(), size);
    for (size_t i = 0; i < values.size(); ++i) {
      const float expected = values[i] / static_cast<float>(size);
      if (std::isnan(expected)) {
        CHECK(std::isnan(got[i]));
        continue;
      }
      uint32_t a, b;
      std::memcpy(&a, &got[i], sizeof a);
      std::memcpy(&b, &expected, sizeof b);
      INFO("size " << size << ", value " << values[i]);
      REQUIRE(a == b);
    }
  }
}

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
      // Longer than a slot: all_gather in 3 chunks, reduce_scatter in rounds of 7 / n per part.
      std::vector<float> long_mine(17), long_gathered(17 * n), long_expected;
      for (size_t i = 0; i < 17; ++i) long_mine[i] = value(rank, i);
      comm->all_gather(long_mine.data(), 17, long_gathered.data());
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < 17; ++i) long_expected.push_back(value(r, i));
      problem += compare_exact(long_gathered, long_expected, "all_gather in chunks");
      std::vector<float> long_parts(11 * n), long_part(11), long_mean(11);
      for (size_t i = 0; i < long_parts.size(); ++i) long_parts[i] = value(rank, i);
      comm->reduce_scatter(long_parts.data(), 11, long_part.data(), ReduceOp::kMean);
      for (size_t i = 0; i < 11; ++i) {
        float total = 0.0f;
        for (int r = 0; r < n; ++r) total += value(r, 11 * rank + i);
        long_mean[i] = total / static_cast<float>(n);
      }
      problem += compare_exact(long_part, long_mean, "reduce_scatter mean in rounds");
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

TEST_CASE("shared memory: members that all-reduce different sizes each get a CommError naming both counts") {
  for (const bool area : {false, true}) {  // through the slots, and where the values lie
    rendezvous::InMemoryStore store;
    std::vector<std::string> errors(3);
    check_all_ok(test::run_on_threads(3, [&](int rank) -> std::string {
      auto comm = make_shm_communicator(store, shm_options(rank, 3, area ? "comm/sizes-area/" : "comm/sizes/"));
      std::shared_ptr<float> mine = area ? comm->shared_area(100) : nullptr;
      std::vector<float> own(100, 1.0f);
      float* x = mine ? mine.get() : own.data();
      std::fill(x, x + 100, 1.0f);
      comm->all_reduce(x, 100, ReduceOp::kSum);  // agreed: fine
      if (x[0] != 3.0f) return str("agreed all_reduce gave ", x[0]);
      try {
        comm->all_reduce(x, rank == 1 ? 40 : 100, ReduceOp::kSum);
        return "the mismatched all_reduce went through";
      } catch (const CommError& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
      return "";
    }));
    INFO("area " << area);
    CHECK_THAT(errors[0], Contains("the members disagree on an all-reduce's size: member 1 has 40 values, member 0 "
                                   "(this task) 100"));
    CHECK_THAT(errors[1], Contains("member 0 has 100 values, member 1 (this task) 40"));
    CHECK_THAT(errors[2], Contains("member 1 has 40 values, member 2 (this task) 100"));
  }
}

TEST_CASE("shared memory: a member that stalls (killed: no mark in the segment) is PeerLost once the heartbeats say so") {
  rendezvous::InMemoryStore store;
  std::atomic<bool> heartbeats_lost{false}, done{false};
  std::string outcome;
  double waited = 0.0;
  test::run_on_threads(2, [&](int rank) -> std::string {
    ShmOptions o = shm_options(rank, 2, "comm/stalled/");
    o.peer_lost = [&]() -> std::optional<std::string> {
      if (!heartbeats_lost) return std::nullopt;
      return std::string("task worker:1 was lost after step 3");
    };
    auto comm = make_shm_communicator(store, o);
    if (rank == 1) {
      // Never enters the collective, and keeps its communicator (destroying it
      // would mark the segment broken) until rank 0 is done.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      heartbeats_lost = true;
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return "";
    }
    std::vector<float> x(3, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->all_reduce(x.data(), x.size(), ReduceOp::kSum);
      outcome = "no error";
    } catch (const PeerLost& e) {
      outcome = e.what();
    } catch (const TimeoutError&) {
      outcome = "TimeoutError";
    }
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    done = true;
    return "";
  });
  CHECK_THAT(outcome, Catch::Matchers::Contains("task worker:1 was lost after step 3"));
  CHECK(waited >= 0.15);  // not before the heartbeats said so
  CHECK(waited < 5.0);    // long before the 10 s deadline
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
    // Two machines: the pieces go through one buffer (the leaders' Gloo takes one).
    if (comm->reduces_pieces_in_place()) problem += "2 machines claim to reduce pieces in place";
    problem += check_pieces(*comm, rank, kRanks, ReduceOp::kMean, 3);
    comm->barrier();
    return problem;
  }));
}

TEST_CASE("hierarchical on one machine reduces pieces in place, through its shared memory") {
  const HostLayout layout = HostLayout::from_keys({"a", "a"});
  rendezvous::InMemoryStore store;
  check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
    auto local = make_shm_communicator(store, shm_options(rank, 2, "comm/h1/"));
    std::unique_ptr<Communicator> leaders;
    if (rank == 0) {  // the machine's leader, alone in the leaders' group
      GlooOptions g;
      g.size = 1;
      g.prefix = "comm/h1/leaders/";
      g.timeout_seconds = 10.0;
      leaders = make_gloo_communicator(store, g);
    }
    auto comm = make_hierarchical_communicator(rank, layout, std::move(local), std::move(leaders));
    if (!comm->reduces_pieces_in_place()) return "one machine: pieces should go to shared memory where they lie";
    return check_pieces(*comm, rank, 2, ReduceOp::kMean, 0) + check_pieces(*comm, rank, 2, ReduceOp::kSum, 5);
  }));
}

TEST_CASE("shared memory: pieces in the shared area are reduced where they lie, into every member's area") {
  for (const int n : {2, 3}) {
    const std::string prefix = "comm/area" + std::to_string(n) + "/";
    rendezvous::InMemoryStore store;
    check_all_ok(test::run_on_threads(n, [&](int rank) -> std::string {
      auto shm = make_shm_communicator(store, shm_options(rank, n, prefix));
      // As the strategy reaches it: through the flight recorder, and a one-machine
      // hierarchical group would hand it on the same way.
      auto comm = make_recorded(borrow(*shm), "area-test");
      constexpr size_t kFloats = 10000;  // more than the tiny slots: no chunks here
      std::shared_ptr<float> area = comm->shared_area(kFloats);
      if (!area) return "no shared area";
      float* mine = area.get();
      // Gradients as a model lays them out: pieces in the area with padding
      // between them, plus a few values outside it (the loss sums riding along).
      std::vector<float> riding(5);
      std::string problem;
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < kFloats; ++i) mine[i] = value(rank, i + round);
        for (size_t i = 0; i < riding.size(); ++i) riding[i] = value(rank, 7000 + i + round);
        const std::vector<Piece> pieces = {{mine, 3000}, {mine + 3072, 5000}, {riding.data(), riding.size()},
                                           {mine + 8192, 1808}};
        const ReduceOp op = round == 1 ? ReduceOp::kSum : ReduceOp::kMean;
        comm->all_reduce_pieces(pieces, op);
        auto expected = [&](size_t i) {
          float e = 0.0f;
          for (int r = 0; r < n; ++r) e += value(r, i + round);
          return op == ReduceOp::kMean ? e / static_cast<float>(n) : e;
        };
        for (const Piece& p : pieces) {
          if (p.data == riding.data()) continue;
          const size_t first = static_cast<size_t>(p.data - mine);
          std::vector<float> want(p.count);
          for (size_t k = 0; k < p.count; ++k) want[k] = expected(first + k);
          problem += compare_exact({p.data, p.data + p.count}, want, "area piece at " + std::to_string(first));
        }
        std::vector<float> want_riding(riding.size());
        for (size_t k = 0; k < riding.size(); ++k) want_riding[k] = expected(7000 + k);
        problem += compare_exact(riding, want_riding, "values outside the area");
        // The padding between the pieces is nobody's: left as this member wrote it.
        if (mine[3050] != value(rank, 3050 + round)) problem += "the padding between pieces was written; ";
        // Other collectives go through the slots, as before, between area ones.
        problem += check_pieces(*comm, rank, n, ReduceOp::kSum, 3);
        if (!problem.empty()) break;
      }
      // More values outside the area than its spill room: through the slots.
      std::vector<float> big(1000);
      for (size_t i = 0; i < big.size(); ++i) big[i] = value(rank, i);
      const std::vector<Piece> mixed = {{mine, 100}, {big.data(), big.size()}};
      for (size_t i = 0; i < 100; ++i) mine[i] = value(rank, i);
      comm->all_reduce_pieces(mixed, ReduceOp::kSum);
      std::vector<float> want(100);
      for (size_t i = 0; i < want.size(); ++i)
        for (int r = 0; r < n; ++r) want[i] += value(r, i);
      problem += compare_exact({mine, mine + 100}, want, "area piece beside a large outside piece");
      // Asked again (a strategy made anew): the same area, zero-filled; another size: none.
      if (comm->shared_area(kFloats).get() != mine) problem += "asked again, another area; ";
      if (mine[0] != 0.0f || mine[kFloats - 1] != 0.0f) problem += "asked again, not zero-filled; ";
      if (comm->shared_area(kFloats + 1)) problem += "an area of another size; ";
      return problem;
    }));
    CHECK_FALSE(segment_left(prefix + "area"));  // unlinked once every member mapped it
  }
}

TEST_CASE("shared memory: a shared area that /dev/shm cannot hold is none on every member, not a crash later") {
  rendezvous::InMemoryStore store;
  std::vector<int> got(2, -1);
  check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
    auto shm = make_shm_communicator(store, shm_options(rank, 2, "comm/huge-area/"));
    // 2 x 2^40 floats (8 TiB each): more than any /dev/shm; the pages are
    // reserved when the segment is made, so this fails there, on member 0.
    got[static_cast<size_t>(rank)] = shm->shared_area(size_t{1} << 40) != nullptr;
    // The group still works, through its slots.
    std::vector<float> x(10, static_cast<float>(rank + 1));
    shm->all_reduce(x.data(), x.size(), ReduceOp::kSum);
    return x[9] == 3.0f ? "" : "the all-reduce after the refused area is wrong";
  }));
  CHECK(got == std::vector<int>{0, 0});
  CHECK_FALSE(segment_left("comm/huge-area/area"));
}
