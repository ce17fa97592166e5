// The in-process communicator: 4 replicas on 4 threads. Exact results of every
// collective, bit-identical sums across repeated runs (rank-ordered reduction,
// whatever the thread timing), and deadlines when a member never arrives.
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/local/local_communicator.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"
#include "core/timer.h"
#include "support/rank_threads.h"

using namespace dtrain;
using namespace dtrain::comm;

namespace {

using Body = std::function<std::string(Communicator&)>;
using test::check_all_ok;

// Runs body on one thread per member; returns each member's problem ("" if none).
std::vector<std::string> run_group(std::vector<std::unique_ptr<Communicator>>& group, const Body& body) {
  return test::run_on_threads(static_cast<int>(group.size()), [&](int r) { return body(*group[static_cast<size_t>(r)]); });
}

std::string compare(const std::vector<float>& got, const std::vector<float>& expected, const std::string& what) {
  return test::compare_exact(got, expected, what);
}

float value(int rank, size_t i) { return static_cast<float>((i % 1000) + 10 * rank); }

float sum_over_ranks(int n, size_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += value(r, i);
  return s;
}

}  // namespace

TEST_CASE("local group: every collective gives exact results on 4 threads") {
  const int n = 4;
  auto group = make_local_group(n, 20.0);
  const auto problems = run_group(group, [n](Communicator& c) -> std::string {
    const int r = c.rank();
    if (c.size() != n) return "wrong size";
    for (size_t count : {size_t{1}, size_t{7}, size_t{1001}, size_t{1} << 20}) {
      std::vector<float> x(count), sum(count), mean(count);
      for (size_t i = 0; i < count; ++i) {
        x[i] = value(r, i);
        sum[i] = sum_over_ranks(n, i);
        mean[i] = sum[i] / n;
      }
      std::vector<float> y = x;
      c.all_reduce(y.data(), count, ReduceOp::kSum);
      if (auto p = compare(y, sum, str("sum of ", count)); !p.empty()) return p;
      y = x;
      c.all_reduce(y.data(), count, ReduceOp::kMean);
      if (auto p = compare(y, mean, str("mean of ", count)); !p.empty()) return p;

      std::vector<float> b = x, from_root(count);
      for (size_t i = 0; i < count; ++i) from_root[i] = value(1, i);
      c.broadcast(b.data(), count, 1);
      if (auto p = compare(b, from_root, str("broadcast of ", count)); !p.empty()) return p;

      std::vector<float> out(count * n), gathered(count * n);
      for (int k = 0; k < n; ++k)
        for (size_t i = 0; i < count; ++i) gathered[k * count + i] = value(k, i);
      c.all_gather(x.data(), count, out.data());
      if (auto p = compare(out, gathered, str("all_gather of ", count)); !p.empty()) return p;

      std::vector<float> full(count * n), mine(count), rs_sum(count), rs_mean(count);
      for (size_t j = 0; j < full.size(); ++j) full[j] = value(r, j);
      for (size_t i = 0; i < count; ++i) {
        rs_sum[i] = sum_over_ranks(n, r * count + i);
        rs_mean[i] = rs_sum[i] / n;
      }
      c.reduce_scatter(full.data(), count, mine.data(), ReduceOp::kSum);
      if (auto p = compare(mine, rs_sum, str("reduce_scatter of ", count)); !p.empty()) return p;
      // In place: the output is this rank's own slice of the input.
      c.reduce_scatter(full.data(), count, full.data() + r * count, ReduceOp::kMean);
      std::vector<float> slice(full.begin() + r * count, full.begin() + (r + 1) * count);
      if (auto p = compare(slice, rs_mean, str("in-place reduce_scatter of ", count)); !p.empty()) return p;
      c.barrier();
    }
    return "";
  });
  check_all_ok(problems);
}

TEST_CASE("local group: sums of non-integer data are bit-identical across runs and ranks") {
  // Random floats: the result depends on the order of additions, which must be
  // rank 0, 1, 2, 3 for every element however the threads are scheduled.
  const int n = 4;
  const size_t count = 100003;
  std::vector<std::vector<float>> inputs(n, std::vector<float>(count));
  Rng rng(42);
  for (auto& v : inputs)
    for (auto& x : v) x = static_cast<float>(rng.uniform(-1.0, 1.0) * 1e3);
  std::vector<float> expected(count);
  for (size_t i = 0; i < count; ++i) {
    float s = inputs[0][i];
    for (int r = 1; r < n; ++r) s += inputs[r][i];
    expected[i] = s;
  }
  for (int run = 0; run < 5; ++run) {
    auto group = make_local_group(n, 20.0);
    std::vector<std::vector<float>> results(n);
    const auto problems = run_group(group, [&](Communicator& c) -> std::string {
      // Stagger the arrivals differently every run.
      std::this_thread::sleep_for(std::chrono::milliseconds(((c.rank() + run) % n) * 3));
      std::vector<float> x = inputs[c.rank()];
      c.all_reduce(x.data(), count, ReduceOp::kSum);
      results[c.rank()] = x;
      return "";
    });
    check_all_ok(problems);
    for (int r = 0; r < n; ++r) {
      INFO("run " << run << ", rank " << r);
      REQUIRE(results[r].size() == count);
      CHECK(std::memcmp(results[r].data(), expected.data(), count * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("local group: a member that never arrives is a TimeoutError for the others") {
  auto group = make_local_group(4, 0.5);
  Stopwatch watch;
  // Rank 3 never calls; ranks 0..2 all_reduce.
  std::vector<std::unique_ptr<Communicator>> three;
  std::vector<std::string> messages(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> x(10, 1.0f);
      try {
        group[r]->all_reduce(x.data(), x.size(), ReduceOp::kSum);
        messages[r] = "no error";
      } catch (const TimeoutError& e) {
        messages[r] = e.what();
      } catch (const std::exception& e) {
        messages[r] = str("wrong error type: ", e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(watch.seconds() < 5.0);
  for (int r = 0; r < 3; ++r) {
    INFO(messages[r]);
    CHECK_THAT(messages[r], Catch::Contains("rank 3 did not arrive") && !Catch::Contains("wrong error type"));
  }
}

TEST_CASE("local group: a destroyed member is PeerLost for the others, mismatched calls are caught") {
  {
    auto group = make_local_group(2, 10.0);
    group[1].reset();
    std::vector<float> x(4, 1.0f);
    Stopwatch watch;
    CHECK_THROWS_AS(group[0]->all_reduce(x.data(), x.size(), ReduceOp::kSum), PeerLost);
    CHECK(watch.seconds() < 1.0);
  }
  {
    auto group = make_local_group(2, 10.0);
    std::string m0, m1;
    std::thread t([&] {
      std::vector<float> x(4, 1.0f);
      try {
        group[1]->broadcast(x.data(), x.size(), 0);
      } catch (const std::exception& e) {
        m1 = e.what();
      }
    });
    std::vector<float> x(4, 1.0f);
    try {
      group[0]->all_reduce(x.data(), x.size(), ReduceOp::kSum);
    } catch (const std::exception& e) {
      m0 = e.what();
    }
    t.join();
    CHECK_THAT(m0 + m1, Catch::Contains("broadcast") && Catch::Contains("all_reduce"));
    CHECK_FALSE(m0.empty());
    CHECK_FALSE(m1.empty());
  }
}
