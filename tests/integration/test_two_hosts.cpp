// Two "machines" for real on this one: two network namespaces on a bridge (in a
// third namespace, so nothing touches this machine's own network), each with its
// own address (10.213.X.1, 10.213.X.2) and, through a UTS namespace per task, its
// own hostname, so the rendezvous sees two hosts (support/netns_hosts.h). Four
// multi_worker_mirrored tasks, two per machine, train 20 steps of the MLP with
// Gloo's ring and with the hierarchical all-reduce (shared memory within a
// machine, Gloo between the two leaders): the per-step losses agree within 1e-4,
// every task ends with the same parameters, and the bytes that cross each
// machine's link fall (ring: each rank sends 2(n-1)/n of the gradients to its
// ring neighbour, 2 of the 4 hops cross; hierarchical: the 2 leaders exchange the
// whole gradients once: 1.5 G -> 1 G per machine per step). The namespaces are
// created and torn down by the test; it needs root and iproute2, and says
// DTRAIN-SKIPPED (a skip in ctest) with the reason without them.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "integration/start_dtrain.h"
#include "support/netns_hosts.h"
#include "support/temp_dir.h"

namespace dtrain::integration {
namespace {

using nlohmann::json;
using test::NetnsHosts;

constexpr int kSteps = 20;

struct Run {
  std::vector<double> losses;       // the chief's per-step loss
  std::vector<std::string> hashes;  // every task's params_sha256
  int64_t cross_bytes = 0;          // bytes over machine a's link (b's are the same traffic)
  double step_ms = 0.0;             // the chief's
};

Run train(const NetnsHosts& hosts, const TempDir& dir, const std::string& communication) {
  json job = small_mlp_job(4096, 256);
  job["strategy"] = {{"type", "multi_worker_mirrored"}, {"communication", communication}};
  job["train"]["batch_size_per_replica"] = 32;
  job["train"]["steps_per_epoch"] = kSteps;
  job["train"]["log_every_steps"] = 1;
  job["output"] = {{"dir", dir.file("out")}};
  const std::string config = write_job(dir, job);
  const json cluster = {{"worker", {hosts.address(0, 23401), hosts.address(0, 23402), hosts.address(1, 23403),
                                     hosts.address(1, 23404)}}};
  const int64_t before = hosts.link_bytes(0);
  REQUIRE(before >= 0);
  std::vector<std::unique_ptr<Child>> tasks;
  for (int i = 0; i < 4; ++i) {
    const int host = i / 2;
    StartSpec spec;
    spec.env = {"TF_CONFIG=" + json{{"cluster", cluster}, {"task", {{"type", "worker"}, {"index", i}}}}.dump(),
                "DTRAIN_JOB_SECRET=two-hosts-test", "DTRAIN_JOB_ID", "DTRAIN_LAUNCHED", "DTRAIN_INJECT",
                "DTRAIN_LISTEN_FD"};
    const std::vector<std::string> argv =
        hosts.command(host, {DTRAIN_BINARY, "run", "--config", config, "--threads", "1", "--summary",
                             dir.file("summary" + std::to_string(i) + ".json")});
    tasks.push_back(start_program(argv[0], {argv.begin() + 1, argv.end()}, spec));
  }
  Run run;
  for (int i = 0; i < 4; ++i) {
    const RunOutput r = tasks[i]->finish(120.0);
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    const json s = read_json_file(dir.file("summary" + std::to_string(i) + ".json"));
    run.hashes.push_back(s["params_sha256"]);
    if (i == 0) run.step_ms = s["step_ms"].get<double>();
  }
  const int64_t after = hosts.link_bytes(0);
  REQUIRE(after >= before);
  run.cross_bytes = after - before;
  for (const json& record : read_json_lines(dir.file("out/metrics.jsonl")))
    if (record["kind"] == "step") run.losses.push_back(record["loss"].get<double>());
  REQUIRE(run.losses.size() == kSteps);
  return run;
}

}  // namespace

TEST_CASE("two machines x two tasks: hierarchical follows ring, with fewer bytes across the machines' links",
          "[netns]") {
  const NetnsHosts hosts(2);
  if (!hosts.ok()) {
    WARN("DTRAIN-SKIPPED: cannot make two machines out of network namespaces: " << hosts.reason());
    return;
  }
  TempDir ring_dir, hier_dir;
  const Run ring = train(hosts, ring_dir, "ring");
  const Run hier = train(hosts, hier_dir, "hierarchical");
  for (const Run* r : {&ring, &hier})
    for (const std::string& h : r->hashes) CHECK(h == r->hashes[0]);  // every task, the same parameters
  for (int i = 0; i < kSteps; ++i) {
    INFO("step " << i + 1 << ": ring " << ring.losses[i] << ", hierarchical " << hier.losses[i]);
    CHECK(std::fabs(ring.losses[i] - hier.losses[i]) <= 1e-4 * std::fabs(ring.losses[i]));
  }
  WARN("bytes across machine a's link per step: ring " << ring.cross_bytes / kSteps << ", hierarchical "
                                                         << hier.cross_bytes / kSteps << " (ratio "
                                                         << static_cast<double>(hier.cross_bytes) / ring.cross_bytes
                                                         << "); ms per step: ring " << ring.step_ms
                                                         << ", hierarchical " << hier.step_ms);
  CHECK(hier.cross_bytes < 0.8 * ring.cross_bytes);
  CHECK(hier.cross_bytes > 0);
}

}  // namespace dtrain::integration
