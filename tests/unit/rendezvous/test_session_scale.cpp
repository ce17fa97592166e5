// Many ClusterSessions of one job in this process, one thread each, against the
// chief's real StoreServer: the join, the agreement and the final barrier cost
// O(1) store requests per task (they cost N^2 before: every task read every
// other's keys), the roster gives every task every task's machine, and a task
// whose job differs is named by every task, which each stop with a ConfigError.
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <thread>

#include "core/error.h"
#include "core/host.h"
#include "core/log.h"
#include "core/sha256.h"
#include "rendezvous/bench_rendezvous.h"
#include "rendezvous/cluster_session.h"

using namespace dtrain;
using namespace dtrain::rendezvous;

namespace {

struct Job {
  BenchJob job;
  std::shared_ptr<StoreServer> server;
  config::ClusterSpec cluster;

  explicit Job(int tasks) {
    job.tasks = tasks;
    job.credentials = {"scale-test", "secret-" + random_hex(8)};
    // No heartbeat during the test: the request counts are the rendezvous' own.
    job.heartbeat_interval = 30.0;
    job.heartbeat_timeout = 60.0;
    job.rendezvous_timeout = 60.0;
    server = std::make_shared<StoreServer>("127.0.0.1", 0, bench_server_options(job));
    job.port = server->port();
    cluster = bench_cluster(job);
  }

  SessionSpec spec(int index) const {
    SessionSpec s = bench_task_spec(job, index, cluster);
    if (index == 0) s.server = server;
    return s;
  }
};

// Runs `body` on a session of each task, all at once; returns each task's error ("" = none).
std::vector<std::string> run_tasks(const Job& job, const std::function<SessionSpec(int)>& spec_of,
                                   const std::function<void(ClusterSession&, int)>& body) {
  const int n = job.job.tasks;
  // (each task's "all N tasks joined" line, N times, says nothing here)
  const log::Level level = log::level();
  log::set_level(log::Level::kWarn);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        ClusterSession session(spec_of(i));
        body(session, i);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(i)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  log::set_level(level);
  return errors;
}

}  // namespace

TEST_CASE("96 tasks join, agree and finish in O(1) store requests each, and know every task's machine") {
  const Job job(96);
  std::vector<int> on_this_host(96, 0);
  std::vector<std::string> machine_of_last(96);
  int64_t requests_at_finish = 0;
  const auto errors = run_tasks(job, [&](int i) { return job.spec(i); }, [&](ClusterSession& s, int i) {
    on_this_host[static_cast<size_t>(i)] = s.tasks_on_this_host();
    machine_of_last[static_cast<size_t>(i)] = s.hosts().at("worker:94");
    if (i == 0) requests_at_finish = job.server->requests_served();
    s.finish();
  });
  CHECK(errors == std::vector<std::string>(96, ""));
  CHECK(on_this_host == std::vector<int>(96, 96));
  CHECK(machine_of_last == std::vector<std::string>(96, host_identity()));
  // Join: a set and a wait and a get each (the chief: a get_many); finish: a set,
  // an add, a wait, and done. Every task reading every other's keys was 96^2 = 9,216.
  // (A slow start, as under ThreadSanitizer, adds a few: each 5 s the chief and
  // any task still waiting ask again and say who is missing. 390 was seen there.)
  INFO("requests by the time the chief passed the barrier: " << requests_at_finish);
  CHECK(requests_at_finish <= 5 * 96);
  CHECK(job.server->requests_served() <= 9 * 96);
}

TEST_CASE("one task of 12 with another job config is named by every task, and all stop with a ConfigError") {
  const Job job(12);
  const auto spec_of = [&](int i) {
    SessionSpec s = job.spec(i);
    if (i == 8) {  // worker:7
      s.agreement_document = R"({"train":{"epochs":7}})";
      s.agreement = {{"config_sha256", sha256_hex(s.agreement_document)}};
    }
    return s;
  };
  const auto errors = run_tasks(job, spec_of, [](ClusterSession&, int) {});
  for (int i = 0; i < 12; ++i) {
    INFO("task " << i << ": " << errors[static_cast<size_t>(i)]);
    CHECK_THAT(errors[static_cast<size_t>(i)], Catch::Contains("the tasks of this job disagree"));
  }
  // The chief and the others name worker:7 and the key that differs; worker:7 says it in its own words.
  CHECK_THAT(errors[0], Catch::Contains("worker:7 has config_sha256"));
  CHECK_THAT(errors[0], Catch::Contains("the keys that differ: "));
  CHECK_THAT(errors[3], Catch::Contains("worker:7 has config_sha256"));
  CHECK_THAT(errors[8], Catch::Contains("chief:0 has config_sha256"));
  CHECK_THAT(errors[8], Catch::Contains("on chief:0 and 7 on worker:7"));
}
