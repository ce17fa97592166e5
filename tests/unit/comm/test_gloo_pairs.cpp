// Which Gloo pairs a communicator connects (comm/gloo/gloo_pairs.h): only the
// neighbours its collectives need when it is made, a pair more on a first send or
// recv to another rank, the rest of the mesh on the first reduce_scatter; and
// every collective still exact on a group (9 ranks) where most pairs are absent.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo/gloo_communicator.h"
#include "comm/gloo/gloo_pairs.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/timer.h"
#include "rendezvous/store.h"
#include "support/rank_threads.h"

using namespace dtrain;
using namespace dtrain::comm;

namespace {

using test::check_all_ok;
using test::compare_exact;

std::unique_ptr<Communicator> join(rendezvous::Store& store, int rank, int size, const std::string& prefix,
                                   bool full_mesh = false, double timeout = 30.0) {
  GlooOptions o;
  o.rank = rank;
  o.size = size;
  o.prefix = prefix;
  o.full_mesh = full_mesh;
  o.timeout_seconds = timeout;
  return make_gloo_communicator(store, o);
}

int64_t pairs_so_far() { return gloo_connect_stats().pairs; }

}  // namespace

TEST_CASE("gloo_neighbours: rank +- 2^i, symmetric, about 2 log2 N") {
  CHECK(gloo_neighbours(0, 1).empty());
  CHECK(gloo_neighbours(0, 2) == std::vector<int>{1});
  CHECK(gloo_neighbours(1, 3) == (std::vector<int>{0, 2}));
  CHECK(gloo_neighbours(0, 9) == (std::vector<int>{1, 2, 4, 5, 7, 8}));
  CHECK(gloo_neighbours(3, 6) == (std::vector<int>{1, 2, 4, 5}));  // 0 is 3 away: not a power of two
  CHECK(gloo_neighbours(0, 4096).size() == 23);                    // +-1 .. +-1024, and 2048 once
  for (int n = 2; n <= 70; ++n) {
    int log2 = 0;
    while ((1 << log2) < n) ++log2;
    for (int r = 0; r < n; ++r) {
      const std::vector<int> mine = gloo_neighbours(r, n);
      INFO("rank " << r << " of " << n);
      CHECK(static_cast<int>(mine.size()) <= 2 * log2);
      CHECK(std::count(mine.begin(), mine.end(), (r + 1) % n) == 1);      // the ring's
      CHECK(std::count(mine.begin(), mine.end(), (r + n - 1) % n) == 1);
      for (int p : mine) {
        const std::vector<int> theirs = gloo_neighbours(p, n);
        CHECK(std::count(theirs.begin(), theirs.end(), r) == 1);  // both sides make the pair
      }
    }
  }
  CHECK(all_other_ranks(2, 4) == (std::vector<int>{0, 1, 3}));
}

TEST_CASE("9 Gloo ranks connect 6 neighbours each, and every collective is exact on them") {
  const int n = 9;
  rendezvous::InMemoryStore store;
  const int64_t before = pairs_so_far();
  std::vector<int64_t> seen;  // rank 0's reading of the pairs after each phase
  const auto problems = test::run_on_threads(n, [&](int r) -> std::string {
    auto c = join(store, r, n, "comm/pairs9/");
    c->barrier();
    if (r == 0) seen.push_back(pairs_so_far() - before);
    // all_reduce, a broadcast from every root, all_gather: on the neighbours alone.
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7 + r);
    c->all_reduce(x.data(), x.size(), ReduceOp::kSum);
    std::vector<float> want(1000);
    for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(n * (i % 7) + n * (n - 1) / 2);
    if (auto p = compare_exact(x, want, "all_reduce"); !p.empty()) return p;
    for (int root = 0; root < n; ++root) {
      std::vector<float> b(5, r == root ? static_cast<float>(100 + root) : -1.0f);
      c->broadcast(b.data(), b.size(), root);
      if (auto p = compare_exact(b, std::vector<float>(5, static_cast<float>(100 + root)), str("broadcast from ", root));
          !p.empty())
        return p;
    }
    std::vector<float> mine{static_cast<float>(r)}, all(n);
    c->all_gather(mine.data(), 1, all.data());
    for (int i = 0; i < n; ++i)
      if (all[static_cast<size_t>(i)] != static_cast<float>(i)) return str("all_gather: slot ", i, " holds ", all[i]);
    c->barrier();
    if (r == 0) seen.push_back(pairs_so_far() - before);
    // Ranks 0 and 3 are not neighbours (3 away): their first messages connect them.
    std::vector<float> message{1, 2, 3}, got(3);
    if (r == 0) {
      c->send(message.data(), 3, 3, 7);
      c->recv(got.data(), 3, 3, 8);
      if (got != message) return "rank 0 got a wrong reply from rank 3";
    } else if (r == 3) {
      c->recv(got.data(), 3, 0, 7);
      c->send(got.data(), 3, 0, 8);
      if (got != message) return "rank 3 got a wrong message from rank 0";
    }
    c->barrier();
    if (r == 0) seen.push_back(pairs_so_far() - before);
    // reduce_scatter runs on Gloo's all-to-all: the rest of the mesh.
    std::vector<float> in(2 * n), out(2);
    for (int i = 0; i < 2 * n; ++i) in[static_cast<size_t>(i)] = static_cast<float>(i + r);
    c->reduce_scatter(in.data(), 2, out.data(), ReduceOp::kSum);
    const float base = static_cast<float>(n * (n - 1) / 2);
    if (auto p = compare_exact(out, {static_cast<float>(n * 2 * r) + base, static_cast<float>(n * (2 * r + 1)) + base},
                               "reduce_scatter");
        !p.empty())
      return p;
    c->barrier();
    if (r == 0) seen.push_back(pairs_so_far() - before);
    return "";
  });
  check_all_ok(problems);
  // Each connected pair counts once on each side.
  CHECK(seen == (std::vector<int64_t>{n * 6, n * 6, n * 6 + 2, n * (n - 1)}));
}

TEST_CASE("GlooOptions::full_mesh connects every pair at once") {
  const int n = 7;
  rendezvous::InMemoryStore store;
  const int64_t before = pairs_so_far();
  check_all_ok(test::run_on_threads(n, [&](int r) -> std::string {
    auto c = join(store, r, n, "comm/mesh7/", true);
    std::vector<float> x{static_cast<float>(r)};
    c->all_reduce(x.data(), 1, ReduceOp::kSum);
    return x[0] == 21.0f ? "" : str("all_reduce gave ", x[0]);
  }));
  CHECK(pairs_so_far() - before == n * (n - 1));
}

TEST_CASE("a first send to a rank that never receives is a TimeoutError naming it") {
  const int n = 6;  // ranks 0 and 3 are not neighbours
  rendezvous::InMemoryStore store;
  std::atomic<bool> done{false};
  std::string error;
  double seconds = 0;
  check_all_ok(test::run_on_threads(n, [&](int r) -> std::string {
    auto c = join(store, r, n, "comm/silent/", false, 1.0);
    if (r == 0) {
      Stopwatch watch;
      std::vector<float> message{1};
      try {
        c->send(message.data(), 1, 3, 1);
      } catch (const TimeoutError& e) {
        error = e.what();
      }
      seconds = watch.seconds();
      done = true;
    }
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // rank 3 never receives
    return "";
  }));
  CHECK_THAT(error, Catch::Contains("send to rank 3") && Catch::Contains("rank 3 made no send or recv") &&
                        Catch::Contains("comm/silent/"));
  CHECK(seconds < 5.0);
}
