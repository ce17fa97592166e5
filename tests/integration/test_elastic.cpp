// strategy.elastic end to end (`dtrain launch --workers M:N`): a worker killed
// mid-epoch is survived without a restart (the others re-form from their
// in-memory state, the epoch's samples each seen once: DTRAIN_SAMPLE_LOG's
// audit against the uninterrupted run's); two killed at once; a kill while the
// chief saves a checkpoint, and that a checkpoint taken after the change
// resumes exactly; a loss during an epoch's end (that end done again, once); fewer than min_workers left: a checkpoint, then exit 4.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

// 4096 Fashion-MNIST samples, 2 epochs; 4 workers of 8 x 3 accumulation steps:
// a global batch of 96, 42 steps an epoch at every size from 2 to 4 tasks.
json elastic_job(const TempDir& dir) {
  json job = small_mlp_job(4096, 256);
  job["strategy"] = {{"type", "multi_worker_mirrored"}};
  job["train"]["batch_size_per_replica"] = 8;
  job["train"]["gradient_accumulation_steps"] = 3;
  job["train"]["epochs"] = 2;
  job["runtime"] = {{"heartbeat_timeout", 4}};
  job["output"] = {{"dir", dir.file("out")}};
  return job;
}

// `dtrain launch --workers <workers>` with the sample audit in dir/samples.
RunOutput launch(const TempDir& dir, const json& job, const std::string& workers,
                 const std::vector<std::string>& extra) {
  std::filesystem::create_directories(dir.file("samples"));
  ::setenv("DTRAIN_SAMPLE_LOG", dir.file("samples").c_str(), 1);
  std::vector<std::string> args = {"launch", "--workers",  workers, "--config", write_job(dir, job),
                                   "--threads", "1", "--summary", dir.file("launch.json")};
  args.insert(args.end(), extra.begin(), extra.end());
  RunOutput r = run_dtrain(args, {240.0, ""});
  ::unsetenv("DTRAIN_SAMPLE_LOG");
  return r;
}

// Every sample index each epoch trained on, over all tasks' audit files, with
// how many times each was trained on.
std::map<int64_t, std::map<int64_t, int>> samples_by_epoch(const TempDir& dir) {
  std::map<int64_t, std::map<int64_t, int>> out;
  for (const auto& file : std::filesystem::directory_iterator(dir.file("samples"))) {
    std::ifstream in(file.path());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      int64_t epoch = 0, step = 0, micros = 0, sample = 0;
      words >> epoch >> step >> micros;
      while (words >> sample) ++out[epoch][sample];
    }
  }
  return out;
}

// The audit: each epoch trained on exactly the samples of the uninterrupted
// run's epoch (`steps` steps of `global_batch`), each once.
void check_same_samples(const TempDir& run, const TempDir& straight, size_t steps = 42, size_t global_batch = 96) {
  const auto got = samples_by_epoch(run), want = samples_by_epoch(straight);
  REQUIRE(got.size() == want.size());
  for (const auto& [epoch, samples] : want) {
    INFO("epoch " << epoch);
    REQUIRE(got.count(epoch));
    std::set<int64_t> twice;
    for (const auto& [sample, times] : got.at(epoch))
      if (times > 1) twice.insert(sample);
    CHECK(twice.empty());
    CHECK(got.at(epoch).size() == samples.size());
    CHECK(samples.size() == steps * global_batch);
    bool same = true;
    for (const auto& [sample, times] : samples) same = same && got.at(epoch).count(sample);
    CHECK(same);
  }
}

// The tasks that finished (those with a summary) and their parameters' hash, which all share.
std::string survivors_hash(const json& launch, size_t survivors) {
  std::string hash;
  size_t finished = 0;
  for (const auto& [task, s] : launch["tasks"].items()) {
    if (!s.is_object()) continue;
    ++finished;
    if (hash.empty()) hash = s["params_sha256"];
    CHECK(s["params_sha256"] == hash);
  }
  CHECK(finished == survivors);
  return hash;
}

}  // namespace

TEST_CASE("elastic: a killed worker is survived without a restart, every sample of the epoch seen once",
          "[integration][elastic]") {
  TempDir straight, killed;
  const RunOutput a = launch(straight, elastic_job(straight), "2:4", {});
  INFO(describe(a));
  REQUIRE(a.exit_code == 0);

  // Step 30 is in the middle of the first epoch.
  const RunOutput r = launch(killed, elastic_job(killed), "2:4", {"--inject", "kill:worker:2@step=30"});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("worker:2 ended with signal 9 (SIGKILL)") &&
                        Catch::Contains("the job goes on without it") &&
                        Catch::Contains("elastic: worker:2 left the job; 3 training task(s) go on from step 30"));
  CHECK_THAT(r.err, !Catch::Contains("restarting"));
  const json s = read_json_file(killed.file("launch.json"));
  CHECK(s["restarts"] == 0);
  const json& chief = s["tasks"]["worker:0"];
  CHECK(chief["steps"] == 84);
  REQUIRE(chief["membership_changes"].size() == 1);
  const json& change = chief["membership_changes"][0];
  CHECK(change["left"] == json::array({"worker:2"}));
  CHECK(change["step"] == 30);
  CHECK(change["training_tasks"] == 3);
  CHECK(change["accumulation_steps"] == 4);  // the global batch of 96 kept: 8 x 3 tasks x 4
  CHECK(change["reform_seconds"].get<double>() > 0.0);
  CHECK(change["reform_seconds"].get<double>() < 5.0);
  survivors_hash(s, 3);
  check_same_samples(killed, straight);

  // metrics.jsonl has the change, and the epochs count every sample.
  int memberships = 0;
  for (const json& record : read_json_lines(killed.file("out/metrics.jsonl"))) {
    if (record["kind"] == "membership") {
      ++memberships;
      CHECK(record["left"] == json::array({"worker:2"}));
    }
    if (record["kind"] == "epoch") CHECK(record["steps"] == 42);
  }
  CHECK(memberships == 1);
  // The survivors' accuracy is the uninterrupted run's, within noise.
  const double want = read_json_file(straight.file("launch.json"))["tasks"]["worker:0"]["test_accuracy"];
  CHECK(chief["test_accuracy"].get<double>() == Approx(want).margin(0.03));
}

TEST_CASE("elastic: launch --max-restarts starts only the killed worker again, and it rejoins the running job",
          "[integration][elastic]") {
  // 6 epochs (252 steps), the kill at step 20: the survivors' 232 steps left take
  // several times as long as starting a task again (at 84 steps and a kill at
  // step 30 it once came after the last step).
  TempDir straight, restarted;
  const auto six_epochs = [](const TempDir& dir) {
    json job = elastic_job(dir);
    job["train"]["epochs"] = 6;
    return job;
  };
  const RunOutput a = launch(straight, six_epochs(straight), "2:4", {});
  REQUIRE(a.exit_code == 0);
  const RunOutput r =
      launch(restarted, six_epochs(restarted), "2:4", {"--inject", "kill:worker:2@step=20", "--max-restarts", "1"});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("starting it again alone (restart 1 of 1): it rejoins the running job"));
  CHECK_THAT(r.err, Catch::Contains("worker:2 joined the job"));
  CHECK_THAT(r.err, !Catch::Contains("restarting the job"));
  const json s = read_json_file(restarted.file("launch.json"));
  CHECK(s["restarts"] == 0);
  const json& changes = s["tasks"]["worker:0"]["membership_changes"];
  REQUIRE(changes.size() >= 1);
  bool left = false, joined = false;
  for (const json& c : changes) {
    left = left || c["left"] == json::array({"worker:2"});
    joined = joined || c["joined"] == json::array({"worker:2"});
  }
  CHECK(left);
  CHECK(joined);
  CHECK(changes.back()["training_tasks"] == 4);
  CHECK(changes.back()["accumulation_steps"] == 3);
  CHECK(s["tasks"]["worker:0"]["steps"] == 252);
  CHECK(s["tasks"]["worker:2"]["steps"] == 252);  // the one started again ends with the others
  survivors_hash(s, 4);
  check_same_samples(restarted, straight);
}

TEST_CASE("elastic: a worker started again at the job's last step: whatever the timing, the job ends at once, exit 0",
          "[integration][elastic]") {
  // Killed after step 84, the last: started again about 0.6 s later, it comes
  // while the survivors re-form for the last epoch's end (it joins them), or
  // after the chief finished training (it is told there is nothing left to
  // join), or as the chief closes the store (exit 4, the job goes on without
  // it), or after the chief ended (the launcher stops it). Before, it waited
  // 13 s for positions no member would post and failed with exit 5, or 300 s
  // for a chief that had gone.
  std::set<std::string> outcomes;
  for (int run = 0; run < 3; ++run) {
    TempDir dir;
    const RunOutput r =
        launch(dir, elastic_job(dir), "2:4", {"--inject", "kill:worker:2@step=84", "--max-restarts", "1"});
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.err, Catch::Contains("starting it again alone (restart 1 of 1)"));
    CHECK_THAT(r.err, !Catch::Contains("did not all post their position"));
    const json s = read_json_file(dir.file("launch.json"));
    for (const char* task : {"worker:0", "worker:1", "worker:3"}) CHECK(s["results"][task]["exit_code"] == 0);
    CHECK(s["wall_seconds"].get<double>() < 30.0);
    CHECK(s["tasks"]["worker:0"]["steps"] == 84);
    const json& again = s["results"]["worker:2"];
    CHECK(again["started_again"] == 1);
    if (r.err.find("worker:2 joined the job") != std::string::npos) {
      outcomes.insert("joined");
      CHECK(s["tasks"]["worker:2"]["steps"] == 84);
    } else if (r.err.find("dtrain: warning: [worker:2] elastic: worker:2 came after the job's last step (84): its "
                          "training has ended, there is nothing left to join") != std::string::npos) {
      outcomes.insert("told it ended");
      CHECK(again["exit_code"] == 0);
    } else if (again["exit_code"] == 4) {  // its connection came as the chief closed the store
      CHECK_THAT(r.err, Catch::Contains("dtrain: error: [worker:2] lost the connection to the chief"));
      outcomes.insert("lost the chief as it ended");
    } else {
      CHECK_THAT(r.err, Catch::Contains("worker:2 was started again, but the chief ended the job before it joined"));
      CHECK(again["meaning"] == "stopped by the launcher: the job ended before it joined");
      outcomes.insert("stopped by the launcher");
    }
  }
  std::string seen;
  for (const std::string& o : outcomes) seen += (seen.empty() ? "" : ", ") + o;
  WARN("outcomes seen: " << seen);
}

TEST_CASE("elastic: two workers killed at the same step are survived", "[integration][elastic]") {
  TempDir straight, killed;
  const RunOutput a = launch(straight, elastic_job(straight), "2:4", {});
  REQUIRE(a.exit_code == 0);
  const RunOutput r = launch(killed, elastic_job(killed), "2:4",
                             {"--inject", "kill:worker:1@step=50", "--inject", "kill:worker:3@step=50"});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const json s = read_json_file(killed.file("launch.json"));
  const json& changes = s["tasks"]["worker:0"]["membership_changes"];
  REQUIRE(changes.size() >= 1);
  CHECK(changes.back()["training_tasks"] == 2);
  CHECK(changes.back()["accumulation_steps"] == 6);
  std::set<std::string> left;
  for (const json& c : changes)
    for (const json& t : c["left"]) left.insert(t.get<std::string>());
  CHECK(left == std::set<std::string>{"worker:1", "worker:3"});
  CHECK(s["tasks"]["worker:0"]["steps"] == 84);
  survivors_hash(s, 2);
  check_same_samples(killed, straight);
}

TEST_CASE("elastic: a kill while the chief saves a checkpoint, and a checkpoint after the change resumes exactly",
          "[integration][elastic]") {
  TempDir killed, resumed;
  json job = elastic_job(killed);
  job["checkpoint"] = {{"dir", killed.file("ckpt")}, {"every_steps", 20}, {"keep", 10}};
  // worker:3 dies as step 20 ends, while the chief writes that step's checkpoint
  // (the others learn of it in the save's parameter check).
  const RunOutput r = launch(killed, job, "2:4", {"--inject", "kill:worker:3@step=20"});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("saved") && Catch::Contains("ckpt-00000020"));
  const json s = read_json_file(killed.file("launch.json"));
  const std::string continued = survivors_hash(s, 3);
  CHECK(s["tasks"]["worker:0"]["membership_changes"][0]["training_tasks"] == 3);

  // The checkpoint of step 60 (after the change, by 3 tasks) resumed by a job
  // of 3 workers with the same global batch (8 x 3 x 4) ends where the
  // re-formed job ended.
  std::filesystem::create_directories(resumed.file("ckpt"));
  std::filesystem::copy(killed.file("ckpt/ckpt-00000060"), resumed.file("ckpt/ckpt-00000060"),
                        std::filesystem::copy_options::recursive);
  json again = elastic_job(resumed);
  again["train"]["gradient_accumulation_steps"] = 4;
  again["checkpoint"] = {{"dir", resumed.file("ckpt")}, {"resume", "auto"}};
  const RunOutput b = launch(resumed, again, "2:3", {});
  INFO(describe(b));
  REQUIRE(b.exit_code == 0);
  CHECK_THAT(b.err, Catch::Contains("resumed from") && Catch::Contains("ckpt-00000060"));
  CHECK(survivors_hash(read_json_file(resumed.file("launch.json")), 3) == continued);
}

TEST_CASE("elastic: a worker lost during an epoch's end: the group does that epoch's end again, once",
          "[integration][elastic]") {
  TempDir killed;
  json job = elastic_job(killed);
  job["checkpoint"] = {{"dir", killed.file("ckpt")}, {"every_epochs", 1}, {"keep", 10}};
  // worker:3 dies as step 42, the first epoch's last, ends: the others find it
  // in the epoch's end (the checkpoint's parameter check).
  const RunOutput r = launch(killed, job, "2:4", {"--inject", "kill:worker:3@step=42"});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("3 training task(s) go on from step 42"));
  survivors_hash(read_json_file(killed.file("launch.json")), 3);
  // Each epoch's end was done once: one record each, with its evaluation, and its checkpoint.
  std::map<int64_t, int> epochs;
  for (const json& record : read_json_lines(killed.file("out/metrics.jsonl")))
    if (record["kind"] == "epoch") {
      ++epochs[record["epoch"].get<int64_t>()];
      CHECK(record["steps"] == 42);
      CHECK(record.contains("val_loss"));
    }
  CHECK(epochs == std::map<int64_t, int>{{1, 1}, {2, 1}});
  CHECK(std::filesystem::exists(killed.file("ckpt/ckpt-00000042")));
  CHECK(std::filesystem::exists(killed.file("ckpt/ckpt-00000084")));
}

TEST_CASE("elastic: fewer than min_workers left saves a checkpoint and stops with exit 4", "[integration][elastic]") {
  TempDir dir;
  json job = elastic_job(dir);
  job["train"]["gradient_accumulation_steps"] = 3;  // 4 x 3 splits over 3 and 4 tasks
  const RunOutput r = launch(dir, job, "3:4", {"--inject", "kill:worker:1@step=25", "--inject", "kill:worker:2@step=25"});
  INFO(describe(r));
  CHECK(r.exit_code == 4);
  CHECK_THAT(r.err, Catch::Contains("fewer than strategy.elastic.min_workers (3); the job stops after step 25") &&
                        Catch::Contains("checkpoint") && Catch::Contains("ckpt-00000025") &&
                        Catch::Contains("resume with --resume"));
  CHECK(std::filesystem::exists(dir.file("out/checkpoints/ckpt-00000025/manifest.json")));
}

TEST_CASE("elastic: a global batch the task count does not divide is dealt out unevenly, every sample once",
          "[integration][elastic]") {
  // 4 workers of 8 samples, no accumulation: 32 a step, 128 steps an epoch. At 3
  // tasks: 2 micro-steps of 16 samples, 6 + 5 + 5 (no task above its 8).
  const auto job_of = [](const TempDir& dir) {
    json job = elastic_job(dir);
    job["train"]["gradient_accumulation_steps"] = 1;
    return job;
  };
  TempDir straight, killed;
  const RunOutput a = launch(straight, job_of(straight), "2:4", {});
  INFO(describe(a));
  REQUIRE(a.exit_code == 0);
  const RunOutput r = launch(killed, job_of(killed), "2:4", {"--inject", "kill:worker:2@step=50"});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("3 training task(s) go on from step 50"));
  CHECK_THAT(r.out + r.err, Catch::Contains("elastic: training again at 3 task(s) (a step: 2 micro-batches of 6, 5, "
                                            "5 samples by task, the global batch of 32 kept)"));
  const json s = read_json_file(killed.file("launch.json"));
  const json& chief = s["tasks"]["worker:0"];
  CHECK(chief["steps"] == 256);
  REQUIRE(chief["membership_changes"].size() == 1);
  const json& change = chief["membership_changes"][0];
  CHECK(change["accumulation_steps"] == 2);
  CHECK(change["micro_batches"] == json::array({6, 5, 5}));
  survivors_hash(s, 3);
  check_same_samples(killed, straight, 128, 32);
  CHECK_THAT(r.err, Catch::Contains("dtrain: launch: 3 of 4 tasks finished in ") &&
                        Catch::Contains("; the job went on without worker:2 (signal 9 (SIGKILL))"));
  // The job's figures, not the last group's: the model said once; the wall time
  // and the samples a second over both epochs, the re-forming included.
  size_t models = 0;
  for (size_t at = r.out.find("Model: "); at != std::string::npos; at = r.out.find("Model: ", at + 1)) ++models;
  CHECK(models == 1);
  double epoch_seconds = 0.0;
  for (const json& record : read_json_lines(killed.file("out/metrics.jsonl")))
    if (record["kind"] == "epoch") epoch_seconds += record["seconds"].get<double>();
  CHECK(chief["wall_seconds"].get<double>() >= epoch_seconds);
  CHECK(chief["train_samples_per_sec"].get<double>() * epoch_seconds == Approx(2 * 128 * 32).epsilon(0.02));
  // Each sample weighs the same: the accuracy is the uninterrupted run's, within noise.
  const double want = read_json_file(straight.file("launch.json"))["tasks"]["worker:0"]["test_accuracy"];
  CHECK(chief["test_accuracy"].get<double>() == Approx(want).margin(0.03));
}

TEST_CASE("elastic: what it cannot do is refused before training", "[integration][elastic]") {
  TempDir dir;
  json job = elastic_job(dir);
  SECTION("a global batch too small to give every task a sample") {
    job["train"]["batch_size_per_replica"] = 1;
    job["train"]["gradient_accumulation_steps"] = 1;  // 4 samples a step: at 3 tasks 2 micro-steps of 2
    const RunOutput r = launch(dir, job, "2:4", {});
    check_error(r, 2, {"strategy.elastic.batch 'global'", "cannot give each of 3 tasks",
                       "raise train.batch_size_per_replica"});
    CHECK_THAT(r.err, !Catch::Contains("[worker:"));  // refused by the launcher, before any task started
  }
  SECTION("ZeRO-1") {
    job["strategy"]["shard_optimizer_state"] = true;
    const RunOutput r = launch(dir, job, "2:4", {});
    check_error(r, 2, {"strategy.elastic", "shard_optimizer_state"});
  }
  SECTION("--workers M above N") {
    const RunOutput r = launch(dir, job, "5:4", {});
    check_error(r, 2, {"--workers: in '5:4' the minimum 5 is above the 4 workers"});
  }
}
