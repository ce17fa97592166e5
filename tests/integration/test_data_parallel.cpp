// Synchronous data parallelism, end to end: the same global batch gives the same
// loss trajectory however it is split (1 worker at 128, 2 workers at 64, 4 at 32,
// mirrored replicas, gradient accumulation), workers end with identical
// parameters, and `dtrain bench allreduce` reports correct results.
#include <catch2/catch.hpp>
#include <sstream>
#include <cmath>
#include <map>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

constexpr int kSteps = 20;

// The shipped MLP (no dropout) on 4096 samples, 20 steps, a loss record every step.
json equivalence_job(const TempDir& dir, const std::string& strategy, int batch_per_replica) {
  json job = small_mlp_job(4096, 256);
  job["strategy"] = {{"type", strategy}};
  job["train"]["batch_size_per_replica"] = batch_per_replica;
  job["train"]["steps_per_epoch"] = kSteps;
  job["train"]["log_every_steps"] = 1;
  job["output"] = {{"dir", dir.file("out")}};
  return job;
}

void require_same_trajectory(const std::vector<double>& base, const std::vector<double>& other,
                             const std::string& what) {
  require_close(other, base, 1e-4, what);
}

// Runs the job on one process (`run`) and returns its step losses.
std::vector<double> run_single(const json& job, const TempDir& dir) {
  const RunOutput r = run_dtrain({"run", "--config", write_job(dir, job), "--threads", "1"}, {120.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  return step_losses(dir, kSteps);
}

// Runs the job as `workers` local tasks with `dtrain launch`; returns the chief's
// step losses and checks that every worker ended with the same parameters and
// reports `replicas_in_sync` (default: one per worker).
std::vector<double> run_workers(const json& job, int workers, const TempDir& dir, int replicas_in_sync = 0) {
  const json launch = launch_job(dir, job, workers);
  for (const auto& [task, s] : launch["tasks"].items())
    CHECK(s["world_size"] == (replicas_in_sync > 0 ? replicas_in_sync : workers));
  return step_losses(dir, kSteps);
}

}  // namespace

TEST_CASE("1 worker at batch 128, 2 at 64 and 4 at 32 follow the same loss trajectory") {
  TempDir one, two, four, ring;
  const auto base = run_single(equivalence_job(one, "one_device", 128), one);
  // `auto`: the tasks share this machine, so shared memory.
  const auto two_workers = run_workers(equivalence_job(two, "multi_worker_mirrored", 64), 2, two);
  require_same_trajectory(base, two_workers, "2 workers");
  const auto four_workers = run_workers(equivalence_job(four, "multi_worker_mirrored", 32), 4, four);
  require_same_trajectory(base, four_workers, "4 workers");
  // Gloo's ring over TCP, by name.
  json over_tcp = equivalence_job(ring, "multi_worker_mirrored", 32);
  over_tcp["strategy"]["communication"] = "ring";
  require_same_trajectory(base, run_workers(over_tcp, 4, ring), "4 workers over Gloo's ring");
  CHECK(base.back() < base.front());  // it does learn
}

TEST_CASE("2 workers with 2 replicas each (reduced in the task first) follow one device's trajectory") {
  TempDir one, both;
  const auto base = run_single(equivalence_job(one, "one_device", 128), one);
  json job = equivalence_job(both, "multi_worker_mirrored", 32);
  job["strategy"]["replicas"] = 2;
  const auto workers = run_workers(job, 2, both, 4);
  require_same_trajectory(base, workers, "2 workers x 2 replicas");
}

TEST_CASE("3 workers on one machine through shared memory (hierarchical), the gradients in it, follow one device's trajectory") {
  TempDir one, shared;
  const auto base = run_single(equivalence_job(one, "one_device", 96), one);
  json job = equivalence_job(shared, "multi_worker_mirrored", 32);
  job["strategy"]["communication"] = "hierarchical";
  require_same_trajectory(base, run_workers(job, 3, shared), "3 workers, hierarchical");
  // The gradients live in the shared memory (reduced where they lie).
  CHECK_THAT(read_file(shared.file("out/logs/worker-0.log")),
             Catch::Matchers::Contains("hierarchical all-reduce: 1 machine(s), 3 tasks") &&
                 Catch::Matchers::Contains("comm: gradients in shared memory, all-reduced where they lie"));
}

TEST_CASE("gradient accumulation of 2 micro-batches of 64 matches one step at 128") {
  TempDir big, accumulated;
  const auto base = run_single(equivalence_job(big, "one_device", 128), big);
  json job = equivalence_job(accumulated, "one_device", 64);
  job["train"]["gradient_accumulation_steps"] = 2;
  require_same_trajectory(base, run_single(job, accumulated), "accumulation K=2");
}

TEST_CASE("mirrored replicas in one process match one device at the same global batch") {
  TempDir single, mirrored;
  const auto base = run_single(equivalence_job(single, "one_device", 128), single);
  json job = equivalence_job(mirrored, "mirrored", 64);
  job["strategy"]["devices"] = {"cpu:0", "cpu:1"};
  require_same_trajectory(base, run_single(job, mirrored), "mirrored x2");
}

TEST_CASE("central_storage with 2 replicas matches one device at the same global batch") {
  TempDir single, central;
  const auto base = run_single(equivalence_job(single, "one_device", 128), single);
  json job = equivalence_job(central, "central_storage", 64);
  job["strategy"]["replicas"] = 2;
  require_same_trajectory(base, run_single(job, central), "central_storage x2");
}

TEST_CASE("accumulation across 2 workers: one all-reduce per update still matches") {
  TempDir single, workers;
  const auto base = run_single(equivalence_job(single, "one_device", 128), single);
  json job = equivalence_job(workers, "multi_worker_mirrored", 32);
  job["train"]["gradient_accumulation_steps"] = 2;
  require_same_trajectory(base, run_workers(job, 2, workers), "2 workers x K=2");
}

TEST_CASE("multi_worker_mirrored without a cluster is a clear config error") {
  TempDir dir;
  const RunOutput r = run_dtrain({"run", "--config", write_job(dir, equivalence_job(dir, "multi_worker_mirrored", 64))});
  check_error(r, 2, {"multi_worker_mirrored needs a cluster", "dtrain launch"});
}

namespace {

// `out` as JSON lines: every line one JSON object, nothing else (no launcher
// prefixes or messages), so a script can read it line by line.
std::vector<json> json_lines(const std::string& out) {
  std::vector<json> objects;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    INFO("stdout line: " << line);
    const json j = json::parse(line, nullptr, false);
    CHECK(j.is_object());
    if (j.is_object()) objects.push_back(j);
  }
  return objects;
}

// bench allreduce's JSON lines: the set-up object ({"setup": true, ...}) first,
// then one per size.
std::vector<json> size_lines(const std::string& out, json* setup = nullptr) {
  std::vector<json> sizes;
  for (const json& j : json_lines(out)) {
    if (j.contains("setup")) {
      if (setup) *setup = j;
    } else {
      sizes.push_back(j);
    }
  }
  return sizes;
}

}  // namespace

TEST_CASE("bench allreduce prints correct nccl-tests style JSON lines for every size, and nothing else") {
  // Gloo's ring by name (`auto` would take shared memory here: the next test's).
  const RunOutput r = run_dtrain({"bench", "allreduce", "--workers", "2", "--sizes", "4K:64K", "--iterations", "3",
                                  "--communication", "ring", "--json"},
                                 {120.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  std::vector<size_t> sizes;
  json setup;
  for (const json& j : size_lines(r.out, &setup)) {
    for (const char* key : {"bytes", "time_us", "algbw_gbps", "busbw_gbps", "correct"}) REQUIRE(j.contains(key));
    CHECK(j["correct"] == true);
    CHECK(j["busbw_gbps"].get<double>() > 0.0);
    sizes.push_back(j["bytes"].get<size_t>());
  }
  CHECK(sizes == std::vector<size_t>{4096, 8192, 16384, 32768, 65536});
  CHECK(setup["ranks"] == 2);
  CHECK(setup["connections"] == 1);
}

TEST_CASE("bench allreduce: 9 Gloo ranks connect 27 pairs (6 neighbours each), 36 with --connections full-mesh") {
  for (const char* mode : {"neighbours", "full-mesh"}) {
    const RunOutput r = run_dtrain({"bench", "allreduce", "--workers", "9", "--sizes", "4K", "--iterations", "2",
                                    "--communication", "ring", "--connections", mode, "--json"},
                                   {180.0, ""});
    INFO(mode << ": " << describe(r));
    REQUIRE(r.exit_code == 0);
    json setup;
    const std::vector<json> sizes = size_lines(r.out, &setup);
    REQUIRE(sizes.size() == 1);
    CHECK(sizes[0]["correct"] == true);
    CHECK(setup["ranks"] == 9);
    CHECK(setup["full_mesh_connections"] == 36);
    CHECK(setup["connections"] == (std::string(mode) == "neighbours" ? 27 : 36));
    CHECK(setup["connections_per_rank_max"] == (std::string(mode) == "neighbours" ? 6 : 8));
    CHECK(setup["connect_seconds_max"].get<double>() > 0.0);
  }
}

TEST_CASE("bench allreduce --communication hierarchical: 3 workers through shared memory, every size exact") {
  const RunOutput r = run_dtrain({"bench", "allreduce", "--workers", "3", "--sizes", "12,4K:4M", "--iterations", "3",
                                  "--communication", "hierarchical", "--json"},
                                 {120.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Matchers::Contains("hierarchical all-reduce: 1 machine(s), 3 tasks"));
  std::vector<size_t> sizes;
  json setup;
  for (const json& j : size_lines(r.out, &setup)) {
    CHECK(j["correct"] == true);
    CHECK(j["ranks"] == 3);
    sizes.push_back(j["bytes"].get<size_t>());
  }
  CHECK(sizes.size() == 12);  // 12 bytes, then 4K..4M
  CHECK(setup["connections"] == 0);  // shared memory only: one machine, no Gloo
}

TEST_CASE("bench ps: 3 workers and 2 ps tasks push and pull every size correctly, split over the ps (JSON lines)") {
  const RunOutput r = run_dtrain({"bench", "ps", "--workers", "3", "--ps", "2", "--sizes", "12,4K:16K", "--iterations",
                                  "3", "--warmup", "1", "--json"},
                                 {120.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  std::vector<size_t> sizes, per_ps;
  for (const json& j : json_lines(r.out)) {
    CHECK(j["correct"] == true);
    CHECK(j["workers"] == 3);
    CHECK(j["ps"] == 2);
    for (const char* key : {"pull_us", "push_us", "pull_mbps_per_ps", "push_mbps_per_ps"})
      CHECK(j[key].get<double>() > 0.0);
    sizes.push_back(j["bytes"].get<size_t>());
    per_ps.push_back(j["bytes_per_ps"].get<size_t>());
  }
  CHECK(sizes == std::vector<size_t>{12, 4096, 8192, 16384});
  CHECK(per_ps == std::vector<size_t>{8, 2048, 4096, 8192});  // 3 floats: 2 on one ps, 1 on the other
}

TEST_CASE("bench rendezvous: 4 and 40 simulated tasks pass the barrier, and every survivor names the killed one") {
  const RunOutput r = run_dtrain({"bench", "rendezvous", "--tasks", "4,40", "--heartbeat-interval", "0.5", "--json"},
                                 {120.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  std::vector<int> tasks;
  for (const json& j : json_lines(r.out)) {
    const int n = j["tasks"].get<int>();
    tasks.push_back(n);
    CHECK(j["survivors"] == n - 1);
    CHECK(j["named_by"] == n - 1);
    CHECK(j["barrier_seconds"].get<double>() > 0.0);
    // O(1) requests per task to the barrier (a heartbeat or two included).
    CHECK(j["barrier_requests"].get<int>() <= 8 * n);
    // A kill closes the connections: the others hear of it at their next heartbeat.
    CHECK(j["detect_seconds"].get<double>() < 0.5 + 2.0);
  }
  CHECK(tasks == std::vector<int>{4, 40});
  const RunOutput bad = run_dtrain({"bench", "rendezvous", "--tasks", "8,1"}, {30.0, ""});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Matchers::Contains("--tasks '8,1': give task counts from 2 to 999999"));
}
