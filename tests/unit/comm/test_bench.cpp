// The all-reduce benchmark: the size-list parser, and a run on a local group and
// on Gloo (figures present and consistent, the data check passing).
#include <catch2/catch.hpp>
#include <thread>

#include "comm/bench_allreduce.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/local/local_communicator.h"
#include "core/error.h"
#include "core/strings.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"

using namespace dtrain;
using namespace dtrain::comm;

TEST_CASE("size lists: single sizes, suffixes and power-of-two ranges") {
  CHECK(parse_size_list("4096") == std::vector<size_t>{4096});
  CHECK(parse_size_list("4K") == std::vector<size_t>{4096});
  CHECK(parse_size_list("4k,1MiB, 1MB ,1G") ==
        std::vector<size_t>{4096, 1 << 20, 1 << 20, size_t{1} << 30});
  const auto range = parse_size_list("4K:64M");
  REQUIRE(range.size() == 15);
  CHECK(range.front() == 4096);
  CHECK(range.back() == size_t{64} << 20);
  for (size_t i = 1; i < range.size(); ++i) CHECK(range[i] == 2 * range[i - 1]);
  CHECK(parse_size_list("12:100") == std::vector<size_t>{12, 24, 48, 96});
  CHECK(parse_size_list("1M:1M") == std::vector<size_t>{1 << 20});
}

TEST_CASE("size lists: bad input is a ConfigError naming it") {
  for (const char* bad : {"", "abc", "4X", "0", "6", "4K:", ":4K", "64M:4K", "4K,,8K", "-4K", "2T",
                          "99999999999999999999999"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_size_list(bad), ConfigError);
  }
  CHECK_THROWS_WITH(parse_size_list("4K:8Q"), Catch::Contains("8Q") && Catch::Contains("4K:8Q"));
}

TEST_CASE("bench_all_reduce on a local group reports consistent figures and a passing check") {
  const int n = 2;
  auto group = make_local_group(n, 20.0);
  std::vector<std::vector<AllReduceResult>> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { results[r] = bench_all_reduce(*group[r], {4096, 1 << 20}, 3, 1); });
  for (auto& t : threads) t.join();
  REQUIRE(results[0].size() == 2);
  for (const auto& res : results[0]) {
    CHECK(res.correct);
    CHECK(res.ranks == 2);
    CHECK(res.iterations == 3);
    CHECK(res.time_us > 0);
    CHECK(res.algbw_gbps == Approx(res.bytes / (res.time_us * 1e-6) / 1e9));
    CHECK(res.busbw_gbps == Approx(res.algbw_gbps));  // 2(n-1)/n = 1 for n = 2
  }
  // Every rank reports the same (agreed) figures.
  CHECK(results[1][1].time_us == results[0][1].time_us);
  const std::string json = to_json(results[0][0]);
  CHECK_THAT(json, Catch::Contains("\"bytes\": 4096") && Catch::Contains("\"busbw_gbps\"") &&
                       Catch::Contains("\"correct\": true"));
}

TEST_CASE("bench_all_reduce over Gloo on 3 ranks passes its data check") {
  using namespace dtrain::rendezvous;
  const int n = 3;
  ServerOptions so;
  so.credentials = {"job-bench", "s3cret"};
  for (int r = 0; r < n; ++r) so.tasks.push_back({str("worker:", r), "127.0.0.1:1"});
  so.chief = "worker:0";
  StoreServer server("127.0.0.1", 0, so);
  std::vector<std::vector<AllReduceResult>> results(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        ClientOptions co;
        co.credentials = so.credentials;
        co.task = str("worker:", r);
        StoreClient client("127.0.0.1", server.port(), co);
        GlooOptions o;
        o.rank = r;
        o.size = n;
        o.prefix = "comm/bench/";
        auto comm = make_gloo_communicator(client, o);
        results[r] = bench_all_reduce(*comm, {4096, 1 << 20}, 3, 1);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    REQUIRE(results[r].size() == 2);
    CHECK(results[r][0].correct);
    CHECK(results[r][1].correct);
    CHECK(results[r][1].busbw_gbps == Approx(results[r][1].algbw_gbps * 4.0 / 3.0));
  }
}
