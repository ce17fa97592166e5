// The Gloo communicator over real TCP on 127.0.0.1: N ranks as threads of this
// process, meeting through one InMemoryStore (no store sockets). Exact results of every collective (integer-valued floats, so sums are
// exact), and what a dead or silent peer turns into.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo/gloo_communicator.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/timer.h"
#include "rendezvous/store.h"
#include "support/rank_threads.h"

using namespace dtrain;
using namespace dtrain::comm;
using namespace dtrain::rendezvous;

namespace {

using test::check_all_ok;
using test::compare_exact;

// Runs body(comm) on n threads, one rank each, all joined through one in-memory
// store (the job's TCP store is tested in test_rendezvous; Gloo's own transport
// still runs over real TCP on 127.0.0.1).
using Body = std::function<std::string(Communicator&)>;

std::vector<std::string> run_ranks(int n, const std::string& prefix, const Body& body,
                                   double timeout_seconds = 30.0) {
  InMemoryStore store;
  return test::run_on_threads(n, [&](int r) {
    GlooOptions o;
    o.rank = r;
    o.size = n;
    o.prefix = prefix;
    o.timeout_seconds = timeout_seconds;
    auto comm = make_gloo_communicator(store, o);
    return body(*comm);
  });
}

std::string compare(const std::vector<float>& got, const std::vector<float>& expected, const std::string& what) {
  return compare_exact(got, expected, what);
}

// Rank r's value at i: small integers, so sums over a few ranks are exact.
float value(int rank, size_t i) { return static_cast<float>((i % 1000) + 10 * rank); }

float sum_over_ranks(int n, size_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += value(r, i);
  return s;
}

}  // namespace

TEST_CASE("gloo all_reduce sums and averages exactly on 2, 3 and 4 ranks") {
  for (int n : {2, 3, 4}) {
    DYNAMIC_SECTION(n << " ranks") {
      const auto problems = run_ranks(n, str("comm/allreduce", n, "/"), [n](Communicator& c) -> std::string {
        if (c.size() != n) return "wrong size";
        for (size_t count : {size_t{1}, size_t{7}, size_t{1001}, size_t{1} << 20}) {
          std::vector<float> x(count), sum(count), mean(count);
          for (size_t i = 0; i < count; ++i) {
            x[i] = value(c.rank(), i);
            sum[i] = sum_over_ranks(n, i);
            mean[i] = sum[i] / static_cast<float>(n);
          }
          std::vector<float> y = x;
          c.all_reduce(y.data(), count, ReduceOp::kSum);
          if (auto p = compare(y, sum, str("sum of ", count)); !p.empty()) return p;
          y = x;
          c.all_reduce(y.data(), count, ReduceOp::kMean);
          if (auto p = compare(y, mean, str("mean of ", count)); !p.empty()) return p;
        }
        return "";
      });
      check_all_ok(problems);
    }
  }
}

TEST_CASE("gloo broadcast, all_gather, reduce_scatter and barrier give exact results") {
  for (int n : {2, 3, 4}) {
    DYNAMIC_SECTION(n << " ranks") {
      const auto problems = run_ranks(n, str("comm/others", n, "/"), [n](Communicator& c) -> std::string {
        const int r = c.rank();
        for (size_t count : {size_t{1}, size_t{13}, size_t{100003}}) {
          // broadcast from root 1
          std::vector<float> b(count), from_root(count);
          for (size_t i = 0; i < count; ++i) {
            b[i] = value(r, i);
            from_root[i] = value(1, i);
          }
          c.broadcast(b.data(), count, 1);
          if (auto p = compare(b, from_root, str("broadcast of ", count)); !p.empty()) return p;

          // all_gather
          std::vector<float> in(count), out(count * n), gathered(count * n);
          for (size_t i = 0; i < count; ++i) in[i] = value(r, i);
          for (int k = 0; k < n; ++k)
            for (size_t i = 0; i < count; ++i) gathered[k * count + i] = value(k, i);
          c.all_gather(in.data(), count, out.data());
          if (auto p = compare(out, gathered, str("all_gather of ", count)); !p.empty()) return p;

          // reduce_scatter: rank k contributes value(k, j) at position j of n*count
          std::vector<float> full(count * n), mine(count), sum(count), mean(count);
          for (size_t j = 0; j < full.size(); ++j) full[j] = value(r, j);
          for (size_t i = 0; i < count; ++i) {
            sum[i] = sum_over_ranks(n, r * count + i);
            mean[i] = sum[i] / static_cast<float>(n);
          }
          c.reduce_scatter(full.data(), count, mine.data(), ReduceOp::kSum);
          if (auto p = compare(mine, sum, str("reduce_scatter sum of ", count)); !p.empty()) return p;
          c.reduce_scatter(full.data(), count, mine.data(), ReduceOp::kMean);
          if (auto p = compare(mine, mean, str("reduce_scatter mean of ", count)); !p.empty()) return p;
        }
        for (int i = 0; i < 5; ++i) c.barrier();
        return "";
      });
      check_all_ok(problems);
    }
  }
}

TEST_CASE("gloo tensor conveniences reduce and broadcast CPU tensors") {
  const auto problems = run_ranks(2, "comm/tensor/", [](Communicator& c) -> std::string {
    Tensor t({2, 3});
    t.fill(static_cast<float>(c.rank() + 1));
    c.all_reduce(t, ReduceOp::kSum);
    for (int64_t i = 0; i < t.numel(); ++i)
      if (t.data()[i] != 3.0f) return "tensor sum";
    t.fill(static_cast<float>(c.rank() * 7));
    c.broadcast(t, 1);
    for (int64_t i = 0; i < t.numel(); ++i)
      if (t.data()[i] != 7.0f) return "tensor broadcast";
    return "";
  });
  check_all_ok(problems);
}

TEST_CASE("a group of one needs no peers") {
  const auto problems = run_ranks(1, "comm/one/", [](Communicator& c) -> std::string {
    std::vector<float> x{1, 2, 3}, out(3);
    c.all_reduce(x.data(), 3, ReduceOp::kMean);
    c.broadcast(x.data(), 3, 0);
    c.all_gather(x.data(), 3, out.data());
    c.reduce_scatter(x.data(), 3, out.data(), ReduceOp::kSum);
    c.barrier();
    return compare(out, {1, 2, 3}, "group of one");
  });
  check_all_ok(problems);
}

TEST_CASE("a rank that never joins is a TimeoutError naming it") {
  InMemoryStore store;
  GlooOptions o;
  o.rank = 0;
  o.size = 2;
  o.prefix = "comm/lonely/";
  o.timeout_seconds = 1.0;
  Stopwatch watch;
  try {
    make_gloo_communicator(store, o);
    FAIL("joined a group whose other rank never came");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("rank 1") && Catch::Contains("comm/lonely/"));
  }
  CHECK(watch.seconds() < 5.0);
}

TEST_CASE("a dead peer fails the survivor's all_reduce within the deadline") {
  // Rank 1 joins, then destroys its communicator (its sockets close) while rank 0
  // goes on to all_reduce with a 2 s deadline.
  InMemoryStore store;
  std::atomic<bool> rank1_gone{false};
  std::string rank1_problem;
  std::thread rank1([&] {
    try {
      GlooOptions o;
      o.rank = 1;
      o.size = 2;
      o.prefix = "comm/dead/";
      o.timeout_seconds = 2.0;
      auto comm = make_gloo_communicator(store, o);
      comm->barrier();
      comm.reset();
    } catch (const std::exception& e) {
      rank1_problem = e.what();
    }
    rank1_gone = true;
  });
  GlooOptions o;
  o.rank = 0;
  o.size = 2;
  o.prefix = "comm/dead/";
  o.timeout_seconds = 2.0;
  auto comm = make_gloo_communicator(store, o);
  comm->barrier();
  while (!rank1_gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  rank1.join();
  REQUIRE(rank1_problem == "");

  std::vector<float> x(1 << 16, 1.0f);
  Stopwatch watch;
  bool failed_as_documented = false;
  std::string message;
  try {
    comm->all_reduce(x.data(), x.size(), ReduceOp::kSum);
  } catch (const PeerLost& e) {
    failed_as_documented = true;
    message = e.what();
  } catch (const TimeoutError& e) {
    failed_as_documented = true;
    message = e.what();
  }
  const double elapsed = watch.seconds();
  INFO(message);
  CHECK(failed_as_documented);
  CHECK(elapsed < 10.0);
  CHECK_THAT(message, Catch::Contains("comm/dead/") && Catch::Contains("rank 0 of 2"));

  // The communicator stays failed: the next call throws at once.
  Stopwatch again;
  CHECK_THROWS_AS(comm->barrier(), Error);
  CHECK(again.seconds() < 1.0);
}

TEST_CASE("a peer that stops participating is a TimeoutError within the deadline") {
  InMemoryStore store;
  std::atomic<bool> rank0_done{false};
  std::thread rank1([&] {
    try {
      GlooOptions o;
      o.rank = 1;
      o.size = 2;
      o.prefix = "comm/silent/";
      o.timeout_seconds = 2.0;
      auto comm = make_gloo_communicator(store, o);
      // Alive, connected, but never calls the all_reduce.
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } catch (const std::exception&) {
    }
  });
  GlooOptions o;
  o.rank = 0;
  o.size = 2;
  o.prefix = "comm/silent/";
  o.timeout_seconds = 2.0;
  auto comm = make_gloo_communicator(store, o);
  std::vector<float> x(1000, 1.0f);
  Stopwatch watch;
  std::string message;
  try {
    comm->all_reduce(x.data(), x.size(), ReduceOp::kSum);
  } catch (const TimeoutError& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = str("wrong error type: ", e.what());
  }
  const double elapsed = watch.seconds();
  rank0_done = true;
  rank1.join();
  INFO(message);
  CHECK_THAT(message, Catch::Contains("comm/silent/") && Catch::Contains("rank 0 of 2") &&
                          !Catch::Contains("wrong error type"));
  CHECK(elapsed >= 1.5);
  CHECK(elapsed < 10.0);
}

namespace {

// The nice value of each thread of this process (field 19 of /proc/self/task/<tid>/stat).
std::vector<int> thread_nice_values() {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream fields(text.substr(text.rfind(')') + 2));  // after "pid (comm) "
    std::string field;
    for (int i = 3; i <= 19 && fields >> field; ++i) {
    }
    out.push_back(std::stoi(field));
  }
  return out;
}

}  // namespace

TEST_CASE("Gloo's event-loop threads run at the lowest priority, the callers' threads as before") {
  const int main_nice = getpriority(PRIO_PROCESS, 0);  // this thread's
  std::vector<int> during;
  check_all_ok(run_ranks(2, "nice", [&](Communicator& comm) {
    std::vector<float> x(4, 1.0f);
    comm.all_reduce(x.data(), x.size(), ReduceOp::kSum);
    if (comm.rank() == 0) during = thread_nice_values();
    comm.barrier();
    return compare(x, std::vector<float>(4, 2.0f), "all_reduce");
  }));
  CHECK(std::count(during.begin(), during.end(), 19) >= 1);  // a spinning loop yields to the work
  CHECK(getpriority(PRIO_PROCESS, 0) == main_nice);
}
