// Three "machines" on real addresses: network namespaces on a bridge
// (support/netns_hosts.h; root and iproute2, else DTRAIN-SKIPPED with the reason),
// each running one plain `dtrain run` task of a multi_worker_mirrored job (the
// MLP, --threads 1), found through a TF_CONFIG that names the namespaces'
// addresses, all with the same DTRAIN_JOB_SECRET. What the network does to the job:
//   - nothing: the job trains to the parameters (params_sha256) of the same job on
//     127.0.0.1 under `dtrain launch --workers 3`;
//   - a host cut off mid-training (`ip link set eth0 down` in its namespace; its
//     task keeps running, nothing tells anyone): with runtime.heartbeat_interval
//     0.5 and heartbeat_timeout 3, every task exits 4 within heartbeat_timeout + 5 s
//     of the cut, the others naming the lost task and its address, and the cut-off
//     task, which can no longer reach the chief, does not train on alone;
//   - delay and loss (`tc qdisc ... netem`; DTRAIN-SKIPPED where the kernel has no
//     sch_netem): the job still ends with exit 0 and the same parameters, and a
//     step takes at least the added one-way delay longer;
//   - job fencing: a host that comes back after its job failed cannot bring the
//     failed job back (see the test case for what exactly that means);
//   - the same cut under strategy.elastic: the cut-off task stops (exit 4: it
//     cannot reach the chief), the other two agree on going on without it once
//     their collective with it gives up (its deadline, heartbeat_timeout + 20 s:
//     Gloo's waits cannot be cut short from outside), and finish the job (exit 0, the same
//     parameters on both, the change in the chief's summary).
// Every child runs under a deadline (start_dtrain.h); the namespaces are removed
// when each test case ends, also when it fails.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "integration/start_dtrain.h"
#include "support/netns_hosts.h"
#include "support/temp_dir.h"

namespace dtrain::integration {
namespace {

using Catch::Matchers::Contains;
using nlohmann::json;
using test::NetnsHosts;

constexpr int kHosts = 3;
constexpr int kPortBase = 23410;  // worker:i listens on kPortBase + i of host i
constexpr const char* kSecret = "netns-test-secret";
constexpr double kHeartbeatInterval = 0.5;
constexpr double kHeartbeatTimeout = 3.0;
constexpr double kExitBound = kHeartbeatTimeout + 5.0;  // from a cut to every task's exit
constexpr double kRendezvousTimeout = 5.0;

using Clock = Child::Clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// False, after saying DTRAIN-SKIPPED with the reason, when the hosts could not be made.
bool usable(const NetnsHosts& hosts) {
  if (hosts.ok()) return true;
  WARN("DTRAIN-SKIPPED: cannot make " << hosts.size() << " machines out of network namespaces: " << hosts.reason());
  return false;
}

// worker:i on host i.
json cluster_of(const NetnsHosts& hosts) {
  json workers = json::array();
  for (int i = 0; i < hosts.size(); ++i) workers.push_back(hosts.address(i, kPortBase + i));
  return {{"worker", workers}};
}

std::string worker_address(const NetnsHosts& hosts, int index) { return hosts.address(index, kPortBase + index); }

// The MLP under multi_worker_mirrored on 3 workers, 32 samples each per step:
// `steps` steps in one epoch.
json short_job(int steps) {
  json job = small_mlp_job(static_cast<int64_t>(steps) * 32 * kHosts, 96);
  job["strategy"] = {{"type", "multi_worker_mirrored"}};
  job["train"]["batch_size_per_replica"] = 32;
  job["runtime"] = {{"rendezvous_timeout", 60}};
  return job;
}

// The MLP for as long as a test lets it run (20 steps an epoch, 100000 epochs),
// with fast heartbeats, so that a cut is found in seconds.
json endless_job() {
  json job = small_mlp_job(960, 48);
  job["strategy"] = {{"type", "multi_worker_mirrored"}};
  job["train"]["batch_size_per_replica"] = 16;
  job["train"]["epochs"] = 100000;
  job["runtime"] = {{"heartbeat_interval", kHeartbeatInterval},
                    {"heartbeat_timeout", kHeartbeatTimeout},
                    {"rendezvous_timeout", kRendezvousTimeout}};
  return job;
}

// Starts `dtrain run --config config --threads 1 [--summary summary]` as worker:index
// inside host `index`, with its TF_CONFIG, the job secret and `extra_env`, and none of
// the variables `dtrain launch` sets (in case the tests themselves run under one).
std::unique_ptr<Child> start_task(const NetnsHosts& hosts, int index, const std::string& config,
                                  const std::string& summary = "", const std::vector<std::string>& extra_env = {}) {
  StartSpec spec;
  const json tf_config = {{"cluster", cluster_of(hosts)}, {"task", {{"type", "worker"}, {"index", index}}}};
  spec.env = {"TF_CONFIG=" + tf_config.dump(), std::string("DTRAIN_JOB_SECRET=") + kSecret, "DTRAIN_JOB_ID",
              "DTRAIN_LAUNCHED", "DTRAIN_INJECT", "DTRAIN_LISTEN_FD"};
  spec.env.insert(spec.env.end(), extra_env.begin(), extra_env.end());
  std::vector<std::string> args = {dtrain_binary(), "run", "--config", config, "--threads", "1"};
  if (!summary.empty()) args.insert(args.end(), {"--summary", summary});
  const std::vector<std::string> argv = hosts.command(index, args);
  return start_program(argv[0], {argv.begin() + 1, argv.end()}, spec);
}

std::vector<std::unique_ptr<Child>> start_job(const NetnsHosts& hosts, const std::string& config,
                                              const TempDir* summaries = nullptr,
                                              const std::vector<std::string>& extra_env = {}) {
  std::vector<std::unique_ptr<Child>> tasks;
  for (int i = 0; i < hosts.size(); ++i)
    tasks.push_back(start_task(hosts, i, config,
                               summaries ? summaries->file("summary" + std::to_string(i) + ".json") : "", extra_env));
  return tasks;
}

// Polls every child until all have ended (true) or `seconds` pass (false), so that
// each one's end_time() is when it ended, not when a later finish() got to it.
bool wait_all(const std::vector<std::unique_ptr<Child>>& tasks, double seconds) {
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (;;) {
    bool all = true;
    for (const auto& t : tasks) all = t->ended() && all;
    if (all) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Waits until every task has printed its third epoch line: joined and training.
void wait_until_training(const std::vector<std::unique_ptr<Child>>& tasks, double seconds) {
  for (size_t i = 0; i < tasks.size(); ++i)
    if (!tasks[i]->wait_for_out("Epoch 3/", seconds))
      FAIL("worker:" << i << " did not reach epoch 3 within " << seconds << " s\n--- stdout ---\n"
                     << tasks[i]->out() << "\n--- stderr ---\n" << tasks[i]->err());
}

// How many epoch lines a task has printed.
int epochs_printed(const std::string& out) {
  int n = 0;
  for (size_t at = out.find("\nEpoch "); at != std::string::npos; at = out.find("\nEpoch ", at + 1)) ++n;
  return n + (out.rfind("Epoch ", 0) == 0 ? 1 : 0);
}

// One finished job: every task's exit 0 and summary.
struct Trained {
  std::vector<json> summaries;
  double step_ms = 0.0;       // the chief's mean step time (summary step_ms)
  double wall_seconds = 0.0;  // the chief's
};

Trained train_on_hosts(const NetnsHosts& hosts, const TempDir& dir, const std::string& config, double deadline) {
  const std::vector<std::unique_ptr<Child>> tasks = start_job(hosts, config, &dir);
  wait_all(tasks, deadline);  // a task still running then: finish() below FAILs with its output
  Trained t;
  for (int i = 0; i < hosts.size(); ++i) {
    const RunOutput r = tasks[static_cast<size_t>(i)]->finish(1.0);
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.err, Contains("rendezvous: all 3 tasks joined and agree"));
    t.summaries.push_back(read_json_file(dir.file("summary" + std::to_string(i) + ".json")));
  }
  t.step_ms = t.summaries[0]["step_ms"].get<double>();
  t.wall_seconds = t.summaries[0]["wall_seconds"].get<double>();
  return t;
}

// The "dtrain: error: ..." line of a task's stderr ("" when there is none).
std::string error_line(const std::string& err) {
  const size_t at = err.find("dtrain: error: ");
  if (at == std::string::npos) return "";
  const size_t begin = err.rfind('\n', at);
  const size_t start = begin == std::string::npos ? 0 : begin + 1;
  return err.substr(start, err.find('\n', at) - start);
}

std::string hash_of(const json& summary) { return summary.at("params_sha256").get<std::string>(); }

}  // namespace

TEST_CASE("netns: 3 hosts on real addresses train to the parameters of the same job on loopback", "[netns]") {
  const NetnsHosts hosts(kHosts);
  if (!usable(hosts)) return;
  TempDir dir, loop_dir;
  // Gloo's ring by name: on loopback the 3 tasks share a machine, where `auto`
  // would reduce through shared memory (another summation order, other bits).
  json job = short_job(10);
  job["strategy"]["communication"] = "ring";
  const std::string config = write_job(dir, job);

  const Trained net = train_on_hosts(hosts, dir, config, 90.0);

  // The same job file on 127.0.0.1: `dtrain launch --workers 3` (its own ports, its
  // own TF_CONFIG per task), each task's run summary in the launch summary.
  StartSpec spec;
  spec.env = {"TF_CONFIG", std::string("DTRAIN_JOB_SECRET=") + kSecret, "DTRAIN_JOB_ID", "DTRAIN_LAUNCHED",
              "DTRAIN_INJECT", "DTRAIN_LISTEN_FD"};
  const std::string launch_summary = loop_dir.file("launch.json");
  auto launch = start_program(dtrain_binary(),
                              {"launch", "--workers", "3", "--threads", "1", "--config", config, "--summary",
                               launch_summary},
                              spec);
  const RunOutput rl = launch->finish(90.0);
  INFO(describe(rl));
  REQUIRE(rl.exit_code == 0);
  const json loop = read_json_file(launch_summary);
  REQUIRE(loop.at("exit_code") == 0);

  for (int i = 0; i < kHosts; ++i) {
    const std::string task = "worker:" + std::to_string(i);
    INFO(task << " on host " << hosts.ip(i) << ": " << net.summaries[static_cast<size_t>(i)].dump() << "\non loopback: "
              << loop["tasks"][task].dump());
    const json& a = net.summaries[static_cast<size_t>(i)];
    const json& b = loop.at("tasks").at(task);
    REQUIRE(b.is_object());
    // A launched task's summary is a `dtrain run` summary: the same fields.
    std::vector<std::string> a_keys, b_keys;
    for (const auto& [k, v] : a.items()) a_keys.push_back(k);
    for (const auto& [k, v] : b.items()) b_keys.push_back(k);
    CHECK(a_keys == b_keys);
    CHECK(hash_of(a) == hash_of(b));
    CHECK(hash_of(a) == hash_of(net.summaries[0]));
    CHECK(a.at("world_size") == 3);
    CHECK(b.at("world_size") == 3);
    CHECK(a.at("steps") == 10);
    CHECK(b.at("steps") == 10);
    CHECK(a.at("global_batch_size") == b.at("global_batch_size"));
  }
  WARN("3 hosts: params_sha256 " << hash_of(net.summaries[0]) << ", " << net.step_ms << " ms per step; loopback: "
                                 << hash_of(loop["tasks"]["worker:0"]) << ", "
                                 << loop["tasks"]["worker:0"]["step_ms"] << " ms per step");
}

TEST_CASE("netns: a host cut off mid-training ends every task, within heartbeat_timeout + 5 s, with exit 4",
          "[netns]") {
  const NetnsHosts hosts(kHosts);
  if (!usable(hosts)) return;
  TempDir dir;
  const std::string config = write_job(dir, endless_job());
  const std::vector<std::unique_ptr<Child>> tasks = start_job(hosts, config);
  wait_until_training(tasks, 30.0);

  constexpr int kVictim = 2;
  std::vector<int> epochs_at_cut;
  for (const auto& t : tasks) epochs_at_cut.push_back(epochs_printed(t->out()));
  const auto cut_at = Clock::now();
  std::string error;
  REQUIRE(hosts.cut(kVictim, &error));  // worker:2 keeps running; its packets go nowhere
  CHECK_FALSE(hosts.reachable(kVictim, hosts.ip(0), kPortBase));
  CHECK_FALSE(hosts.reachable(0, hosts.ip(kVictim), kPortBase + kVictim, 0.5));

  // Longer than the bound, so that a late task is measured rather than killed.
  const bool all_ended = wait_all(tasks, kExitBound + 10.0);
  std::ostringstream timeline;
  for (int i = 0; i < kHosts; ++i) {
    Child& t = *tasks[static_cast<size_t>(i)];
    timeline << "worker:" << i << (i == kVictim ? " (cut off)" : "");
    if (t.ended())
      timeline << " exited " << seconds_between(cut_at, t.end_time()) << " s after the cut";
    else
      timeline << " still running " << seconds_between(cut_at, Clock::now()) << " s after the cut";
    timeline << ", epochs printed: " << epochs_at_cut[static_cast<size_t>(i)] << " at the cut, "
             << epochs_printed(t.out()) << " now\n";
  }
  WARN(timeline.str());
  INFO(timeline.str());
  CHECK(all_ended);

  for (int i = 0; i < kHosts; ++i) {
    Child& t = *tasks[static_cast<size_t>(i)];
    const RunOutput r = t.finish(0.5);  // FAILs (after killing it) a task that is still running
    INFO("worker:" << i << "\n" << describe(r));
    CHECK(seconds_between(cut_at, t.end_time()) <= kExitBound);
    CHECK(r.exit_code == 4);  // another task of the job was lost
    CHECK_THAT(r.err, Contains("dtrain: error: "));
    // No task trains on after the cut (one epoch line may have been on its way).
    CHECK(epochs_printed(r.out) <= epochs_at_cut[static_cast<size_t>(i)] + 1);
    if (i == kVictim) {
      // Cut off from everyone, it loses the chief: its own heartbeat says so.
      CHECK_THAT(r.err, Contains("the chief worker:0 at " + worker_address(hosts, 0)) && Contains("was lost"));
    } else {
      CHECK_THAT(r.err, Contains("task worker:2 (" + worker_address(hosts, kVictim) + ") was lost after step"));
      CHECK_THAT(r.err, Contains("no heartbeat for 3 s"));
    }
  }
}

TEST_CASE("netns: elastic: a host cut off mid-training stops, the others go on without it and finish", "[netns]") {
  const NetnsHosts hosts(kHosts);
  if (!usable(hosts)) return;
  TempDir dir;
  // 10 steps an epoch (3 tasks x 16 x 2 accumulation steps of 960 samples), enough
  // epochs to be training when the cut comes; min_workers 2: two go on.
  json job = endless_job();
  job["train"]["epochs"] = 300;
  job["train"]["gradient_accumulation_steps"] = 2;
  job["strategy"]["elastic"] = {{"min_workers", 2}};
  const std::string config = write_job(dir, job);
  const std::vector<std::unique_ptr<Child>> tasks = start_job(hosts, config, &dir);
  wait_until_training(tasks, 30.0);
  constexpr int kVictim = 2;
  const auto cut_at = Clock::now();
  std::string error;
  REQUIRE(hosts.cut(kVictim, &error));
  // The survivors' collective with the cut-off task gives up after heartbeat_timeout + 20 s;
  // then they train the rest of the 300 epochs (98.6 s in all under ASan on an idle
  // machine, which failed a 120 s wait when the machine was loaded): ample room.
  wait_all(tasks, 300.0);
  std::ostringstream timeline;
  for (int i = 0; i < kHosts; ++i)
    if (tasks[static_cast<size_t>(i)]->ended())
      timeline << "worker:" << i << " exited " << seconds_between(cut_at, tasks[static_cast<size_t>(i)]->end_time())
               << " s after the cut\n";
  WARN(timeline.str());
  const RunOutput cut_off = tasks[kVictim]->finish(1.0);
  INFO(describe(cut_off));
  CHECK(cut_off.exit_code == 4);
  CHECK_THAT(cut_off.err, Contains("the chief worker:0 at " + worker_address(hosts, 0)) && Contains("was lost"));
  CHECK(seconds_between(cut_at, tasks[kVictim]->end_time()) <= kExitBound);
  std::vector<json> summaries;
  for (int i = 0; i < kVictim; ++i) {
    const RunOutput r = tasks[static_cast<size_t>(i)]->finish(1.0);
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.err, Contains("elastic: worker:2 left the job; 2 training task(s) go on"));
    summaries.push_back(read_json_file(dir.file("summary" + std::to_string(i) + ".json")));
  }
  CHECK(hash_of(summaries[0]) == hash_of(summaries[1]));
  CHECK(summaries[0]["steps"] == 3000);
  REQUIRE(summaries[0]["membership_changes"].size() == 1);
  CHECK(summaries[0]["membership_changes"][0]["left"] == json::array({"worker:2"}));
  CHECK(summaries[0]["membership_changes"][0]["accumulation_steps"] == 3);
}

TEST_CASE("netns: under netem delay and loss the job ends with the same parameters, each step slower by the delay",
          "[netns][netem]") {
  const NetnsHosts hosts(kHosts);
  if (!usable(hosts)) return;
  const std::string netem = hosts.netem_available();
  if (!netem.empty()) {
    WARN("DTRAIN-SKIPPED: netem (tc qdisc ... netem) cannot be used here: " << netem);
    return;
  }
  constexpr int kSteps = 20;
  TempDir plain_dir, delay_dir, lossy_dir;
  const std::string config = write_job(plain_dir, short_job(kSteps));

  const Trained plain = train_on_hosts(hosts, plain_dir, config, 90.0);

  // 20 ms more on every packet worker:1's host sends. Whatever the all-reduce
  // algorithm, every task's averaged gradient holds worker:1's gradient, which
  // leaves through that link at least once per step: each step waits >= 20 ms more
  // (Gloo's ring on 3 tasks crosses it twice, in the reduce-scatter and in the
  // all-gather, so about 40 ms are expected; only the 20 ms are asserted).
  std::string why = hosts.add_netem(1, "delay 20ms");
  REQUIRE(why.empty());
  const Trained delayed = train_on_hosts(hosts, delay_dir, config, 120.0);
  REQUIRE(hosts.clear_netem(1).empty());

  // 20 ms and 1% loss on every host's link: TCP retransmits, the job must not notice.
  for (int i = 0; i < kHosts; ++i) {
    why = hosts.add_netem(i, "delay 20ms loss 1%");
    REQUIRE(why.empty());
  }
  const Trained lossy = train_on_hosts(hosts, lossy_dir, config, 200.0);

  WARN("ms per step (chief, " << kSteps << " steps): plain " << plain.step_ms << ", delay 20ms on one host "
                               << delayed.step_ms << " (+" << delayed.step_ms - plain.step_ms
                               << "), delay 20ms loss 1% on every host " << lossy.step_ms << " (+"
                               << lossy.step_ms - plain.step_ms << "); wall seconds " << plain.wall_seconds << ", "
                               << delayed.wall_seconds << ", " << lossy.wall_seconds);
  for (int i = 0; i < kHosts; ++i) {
    INFO("worker:" << i);
    CHECK(hash_of(delayed.summaries[static_cast<size_t>(i)]) == hash_of(plain.summaries[0]));
    CHECK(hash_of(lossy.summaries[static_cast<size_t>(i)]) == hash_of(plain.summaries[0]));
    CHECK(hash_of(plain.summaries[static_cast<size_t>(i)]) == hash_of(plain.summaries[0]));
  }
  CHECK(delayed.step_ms - plain.step_ms >= 20.0);
  CHECK(lossy.step_ms - plain.step_ms >= 20.0);
}

// Job fencing, as dtrain promises it for multi_worker_mirrored (docs/cluster.md,
// "Running on a cluster": a lost task makes every other task exit 4; no task
// waits for a dead peer): a job whose task was lost is over, and a host that
// comes back cannot bring it back. Here that means:
//   1. when the cut-off host's link comes back, early (as soon as the chief has
//      declared it lost, while the failed job's tasks are still shutting down) or
//      late (after the survivors exited), no task goes on: every one of them,
//      the cut-off one included, has exited 4 within heartbeat_timeout + 5 s of the
//      cut; none waits for the lost one to return, none trains on;
//   2. starting tasks of the failed job again (the same job file, TF_CONFIG and
//      job id) is a new rendezvous that needs the whole world: the cut-off task
//      started again on its host, which reaches the others' hosts again, does not
//      train alone; it waits runtime.rendezvous_timeout and exits 5 naming the
//      chief it cannot reach; the chief started again alone exits 5 naming the
//      missing workers. Nothing of the failed job (steps, parameters) carries
//      over; recovering is restarting the whole job (`dtrain launch
//      --max-restarts`, from a checkpoint).
// (Under parameter_server a lost worker may rejoin the running job by design, the
// chief staying up: test_cluster_runtime's case, not fencing.)
TEST_CASE("netns: job fencing: a host that comes back after its job failed cannot rejoin or revive it", "[netns]") {
  for (const bool early : {true, false}) {
    DYNAMIC_SECTION("the link back "
                    << (early ? "as soon as the chief declares the loss" : "after the survivors exited")) {
      const NetnsHosts hosts(kHosts);
      if (!usable(hosts)) return;
      TempDir dir;
      const std::string config = write_job(dir, endless_job());
      const std::string job_id = "DTRAIN_JOB_ID=netns-fencing-" + std::to_string(::getpid());
      const std::vector<std::unique_ptr<Child>> tasks = start_job(hosts, config, nullptr, {job_id});
      wait_until_training(tasks, 30.0);

      constexpr int kVictim = 2;
      const int victim_epochs = epochs_printed(tasks[kVictim]->out());
      const auto cut_at = Clock::now();
      std::string error;
      REQUIRE(hosts.cut(kVictim, &error));
      CHECK_FALSE(hosts.reachable(kVictim, hosts.ip(0), kPortBase));
      double restored_after = 0.0;
      std::string victim_at_restore;
      if (early) {
        // The job fails: the chief declares worker:2 lost; the link comes back at once.
        const bool declared =
            tasks[0]->wait_for_err("worker:2 (" + worker_address(hosts, kVictim) + ") was lost", kExitBound);
        INFO("the chief's stderr:\n" << tasks[0]->err());
        CHECK(declared);
      } else {
        // The survivors exit first; the cut-off task must end by itself as well.
        const auto deadline = cut_at + std::chrono::seconds(static_cast<int>(kExitBound) + 10);
        while (!(tasks[0]->ended() && tasks[1]->ended()) && Clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        wait_all(tasks, std::max(0.0, kExitBound - seconds_between(cut_at, Clock::now())));
      }
      restored_after = seconds_between(cut_at, Clock::now());
      victim_at_restore = tasks[kVictim]->ended() ? "had exited" : "was still running";
      REQUIRE(hosts.restore(kVictim, &error));
      CHECK(hosts.reachable(kVictim, hosts.ip(0), kPortBase));  // a host answers again (nothing listens there)

      const bool all_ended = wait_all(tasks, kExitBound + 10.0);
      std::ostringstream timeline;
      timeline << "link restored " << restored_after << " s after the cut (worker:2 " << victim_at_restore << ");";
      for (int i = 0; i < kHosts; ++i) {
        Child& t = *tasks[static_cast<size_t>(i)];
        timeline << " worker:" << i;
        if (t.ended())
          timeline << " exited " << seconds_between(cut_at, t.end_time()) << " s after the cut;";
        else
          timeline << " still running;";
      }
      WARN(timeline.str());
      CHECK(all_ended);
      if (!early) CHECK(victim_at_restore == "had exited");  // not waiting to rejoin
      for (int i = 0; i < kHosts; ++i) {
        Child& t = *tasks[static_cast<size_t>(i)];
        const RunOutput r = t.finish(0.5);
        INFO("worker:" << i << "\n" << describe(r));
        CHECK(seconds_between(cut_at, t.end_time()) <= kExitBound);
        CHECK(r.exit_code == 4);
        if (i == kVictim) CHECK(epochs_printed(r.out) <= victim_epochs + 1);  // it did not train on
      }

      // The failed job's worker:2, started again on its host (the link is back),
      // with the old job file, TF_CONFIG and job id: nobody is left to train with.
      auto again = start_task(hosts, kVictim, config, "", {job_id});
      const RunOutput r2 = again->finish(kRendezvousTimeout + 15.0);
      {
        INFO(describe(r2));
        CHECK(r2.exit_code == 5);
        CHECK_THAT(r2.err, Contains("dtrain: error: "));
        CHECK_THAT(r2.err, Contains("worker:0 at " + worker_address(hosts, 0)));
        CHECK_THAT(r2.err, Contains("runtime.rendezvous_timeout"));
        CHECK_THAT(r2.out, !Contains("Epoch "));
      }
      // Its chief, started again alone: it waits for the whole world and gives up,
      // naming who is missing.
      auto chief = start_task(hosts, 0, config, "", {job_id});
      const RunOutput r0 = chief->finish(kRendezvousTimeout + 15.0);
      {
        INFO(describe(r0));
        CHECK(r0.exit_code == 5);
        CHECK_THAT(r0.err, Contains("worker:1 at " + worker_address(hosts, 1)));
        CHECK_THAT(r0.err, Contains("worker:2 at " + worker_address(hosts, 2)));
        CHECK_THAT(r0.err, Contains("runtime.rendezvous_timeout"));
        CHECK_THAT(r0.out, !Contains("Epoch "));
      }
      WARN("started again alone: worker:2 exited " << r2.exit_code << " after " << r2.seconds << " s: "
                                                   << error_line(r2.err) << "\nworker:0 exited " << r0.exit_code
                                                   << " after " << r0.seconds << " s: " << error_line(r0.err));
    }
  }
}

}  // namespace dtrain::integration
