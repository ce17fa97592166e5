// Pipeline parallelism end to end under `dtrain launch`: 2- and 4-stage
// pipelines of the MLP and the CNN, both schedules, and 2 stages x 2 copies give
// one_device's per-step loss on the same global batch within 1e-4 and end with
// exactly the parameters of one_device accumulating the same micro-batches (also
// with batch normalization, computed per micro-batch, and in mixed_bfloat16);
// sharded checkpoints load both ways between pipeline and one_device; a killed
// middle stage ends the job with exit 4 naming it; bad stage lists are exit 2
// with the fix.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

constexpr int kSteps = 20;

json with_output(json job, const TempDir& dir, int batch) {
  job["train"]["batch_size_per_replica"] = batch;
  job["train"]["steps_per_epoch"] = kSteps;
  job["train"]["log_every_steps"] = 1;
  job["output"] = {{"dir", dir.file("out")}};
  return job;
}

json mlp(const TempDir& dir, int batch) { return with_output(small_mlp_job(4096, 256), dir, batch); }

// The shipped CNN without its Dropout (dropout masks are drawn per micro-batch,
// as under gradient accumulation, so they would differ from one batch's).
json cnn(const TempDir& dir, int batch) {
  json job = with_output(small_cnn_job(2560, 200), dir, batch);
  json layers = json::array();
  for (const json& l : job["model"]["layers"])
    if (l["type"] != "Dropout") layers.push_back(l);
  job["model"]["layers"] = layers;
  return job;
}

struct Result {
  std::vector<double> losses;
  std::string hash;
  json summary;  // the chief's
};

Result run_single(json job, const TempDir& dir, int accumulation = 1) {
  job["strategy"] = {{"type", "one_device"}};
  if (accumulation > 1) {
    job["train"]["gradient_accumulation_steps"] = accumulation;
    job["train"]["batch_size_per_replica"] = job["train"]["batch_size_per_replica"].get<int>() / accumulation;
  }
  const std::string summary = dir.file("summary.json");
  const RunOutput r = run_dtrain({"run", "--config", write_job(dir, job), "--threads", "1", "--summary", summary},
                                 {120.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const json s = read_json_file(summary);
  return {step_losses(dir, kSteps), s["params_sha256"], s};
}

Result run_pipeline(json job, const json& strategy, int tasks, const TempDir& dir) {
  job["strategy"] = strategy;
  // Every task reports the whole model's hash (launch_job checks they agree).
  const json launch = launch_job(dir, job, tasks);
  for (const auto& [task, s] : launch["tasks"].items()) CHECK(s["strategy"] == "pipeline");
  const json& chief = launch["tasks"]["worker:0"];
  return {step_losses(dir, kSteps), chief["params_sha256"], chief};
}

}  // namespace

TEST_CASE("pipelines of the MLP and the CNN give one_device's losses and its accumulated parameters") {
  struct Case {
    std::string model;
    json strategy;
    int tasks;
  };
  const std::vector<Case> cases = {
      {"mlp", {{"type", "pipeline"}, {"stages", {"dense_1"}}, {"schedule", "1f1b"}}, 2},
      {"mlp", {{"type", "pipeline"}, {"stages", {"dense", "dense_1", "dense_2"}}, {"schedule", "gpipe"}}, 4},
      {"cnn", {{"type", "pipeline"}, {"stages", {"flatten"}}, {"schedule", "gpipe"}}, 2},
      {"cnn", {{"type", "pipeline"}, {"stages", {"max_pooling2d", "flatten", "dense_1"}}, {"schedule", "1f1b"}}, 4},
  };
  for (const std::string model : {"mlp", "cnn"}) {
    const int batch = model == "mlp" ? 128 : 64;
    TempDir one, accumulated;
    const auto make = [&](const TempDir& d) { return model == "mlp" ? mlp(d, batch) : cnn(d, batch); };
    const Result base = run_single(make(one), one);
    const Result acc = run_single(make(accumulated), accumulated, 4);
    for (const Case& c : cases) {
      if (c.model != model) continue;
      INFO(model << " " << c.strategy.dump());
      TempDir dir;
      const Result p = run_pipeline(make(dir), c.strategy, c.tasks, dir);
      require_close(p.losses, base.losses, 1e-4, "pipeline vs one_device");
      CHECK(p.hash == acc.hash);
      CHECK(p.summary["pipeline"]["stages"] == c.tasks);
      CHECK(p.summary["pipeline"]["theoretical_bubble"].get<double>() ==
            Approx(static_cast<double>(c.tasks - 1) / (4 + c.tasks - 1)));
      CHECK(p.summary["world_size"] == 1);
    }
  }
}

TEST_CASE("stages \"auto\" balances the layers by their measured time, the same split on every task") {
  TempDir one, dir;
  const Result base = run_single(cnn(one, 64), one);
  const Result p = run_pipeline(cnn(dir, 64), {{"type", "pipeline"}, {"stages", "auto"}}, 3, dir);
  require_close(p.losses, base.losses, 1e-4, "auto pipeline vs one_device");
  CHECK(p.summary["pipeline"]["split_how"] == "auto: measured time");
  const std::string split = p.summary["pipeline"]["split"];
  CHECK(std::count(split.begin(), split.end(), '|') == 2);
}

TEST_CASE("2 stages x 2 data-parallel copies give one_device's losses on the global batch") {
  TempDir one, dir;
  const Result base = run_single(mlp(one, 128), one);
  const json strategy = {{"type", "pipeline"}, {"stages", {"dense_1"}}, {"data_parallel", 2}, {"micro_batches", 2}};
  const Result p = run_pipeline(mlp(dir, 64), strategy, 4, dir);
  require_close(p.losses, base.losses, 1e-4, "2 x 2 pipeline vs one_device");
  CHECK(p.summary["world_size"] == 2);
  CHECK(p.summary["global_batch_size"] == 128);
}

TEST_CASE("batch normalization in a pipeline is computed per micro-batch, as under gradient accumulation") {
  TempDir accumulated, dir;
  json job = mlp(accumulated, 64);
  job["model"]["layers"] = json::parse(R"([{"type": "Flatten"}, {"type": "Dense", "units": 64},
      {"type": "BatchNormalization"}, {"type": "Activation", "activation": "relu"}, {"type": "Dense", "units": 10}])");
  const Result acc = run_single(job, accumulated, 4);
  job["output"]["dir"] = dir.file("out");
  const Result p = run_pipeline(job, {{"type", "pipeline"}, {"stages", {"batch_normalization"}}}, 2, dir);
  require_close(p.losses, acc.losses, 1e-4, "pipeline vs accumulation");
  CHECK(p.hash == acc.hash);  // moving statistics included (recomputed forwards put them back)
}

TEST_CASE("mixed_bfloat16: a pipeline of the shipped MLP ends bit-identical to one_device accumulating its micro-batches", "[bf16]") {
  // The shipped MLP begins with Flatten, which computes in bfloat16 and needs no
  // input gradient on the first stage, but does on a later one.
  TempDir accumulated, dir;
  json job = mlp(accumulated, 64);
  job["train"]["precision"] = "mixed_bfloat16";
  const Result acc = run_single(job, accumulated, 4);
  job["output"]["dir"] = dir.file("out");
  for (const char* stages : {"dense_1", "dense"}) {
    INFO("stages " << stages);
    const Result p = run_pipeline(job, {{"type", "pipeline"}, {"stages", {stages}}}, 2, dir);
    require_close(p.losses, acc.losses, 1e-4, "bfloat16 pipeline vs accumulation");
    CHECK(p.hash == acc.hash);
    std::filesystem::remove_all(dir.file("out"));
  }
}

TEST_CASE("a pipeline's sharded checkpoint resumes under one_device, and one_device's under a pipeline") {
  // Pipeline (2 stages) and one_device with 4 accumulation steps train identically,
  // so whichever wrote the checkpoint after epoch 1, epoch 2 ends on the same parameters.
  const auto job_in = [](const TempDir& d) {
    json job = mlp(d, 128);
    job["train"]["epochs"] = 2;
    job["train"]["steps_per_epoch"] = 10;
    job["train"]["log_every_steps"] = 0;
    job["checkpoint"] = {{"dir", d.file("ckpt")}, {"every_epochs", 1}};
    return job;
  };
  const json pipeline = {{"type", "pipeline"}, {"stages", {"dense_1"}}};
  const auto run = [&](const json& job, const TempDir& d, bool pipe, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {pipe ? "launch" : "run"};
    if (pipe) args.insert(args.end(), {"--workers", "2"});
    json j = job;
    if (pipe) j["strategy"] = pipeline;
    else {
      j["strategy"] = {{"type", "one_device"}};
      j["train"]["gradient_accumulation_steps"] = 4;
      j["train"]["batch_size_per_replica"] = 32;
    }
    const std::string summary = d.file(pipe ? "launch.json" : "summary.json");
    args.insert(args.end(), {"--config", write_job(d, j), "--threads", "1", "--summary", summary});
    args.insert(args.end(), extra.begin(), extra.end());
    const RunOutput r = run_dtrain(args, {180.0, ""});
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    const json s = read_json_file(summary);
    return pipe ? s["tasks"]["worker:0"] : s;
  };
  TempDir whole;
  const std::string expected = run(job_in(whole), whole, false)["params_sha256"];

  // Pipeline epoch 1, then one_device resumes epoch 2 from its sharded checkpoint.
  TempDir a;
  json first = job_in(a);
  first["train"]["epochs"] = 1;
  run(first, a, true);
  CHECK(std::filesystem::exists(a.file("ckpt/ckpt-00000010/part-00001-of-00002.safetensors")));
  const RunOutput exported = run_dtrain({"ckpt", "export", a.file("ckpt"), "--to", a.file("model.safetensors")});
  INFO(describe(exported));
  CHECK(exported.exit_code == 0);
  json second = job_in(a);
  second["checkpoint"]["resume"] = "auto";
  CHECK(run(second, a, false)["params_sha256"] == expected);

  // one_device epoch 1, then a pipeline resumes epoch 2.
  TempDir b;
  json one_first = job_in(b);
  one_first["train"]["epochs"] = 1;
  run(one_first, b, false);
  json pipe_second = job_in(b);
  pipe_second["checkpoint"]["resume"] = "auto";
  CHECK(run(pipe_second, b, true)["params_sha256"] == expected);
}

TEST_CASE("a killed middle stage ends every task with exit 4 naming it, within the heartbeat bound") {
  TempDir dir;
  json job = mlp(dir, 128);
  job["train"]["steps_per_epoch"] = 200;
  job["strategy"] = {{"type", "pipeline"}, {"stages", {"dense", "dense_1"}}};
  job["runtime"] = {{"heartbeat_interval", 0.5}, {"heartbeat_timeout", 3}};
  const std::string summary = dir.file("launch.json");
  const RunOutput r = run_dtrain({"launch", "--workers", "3", "--config", write_job(dir, job), "--threads", "1",
                                  "--summary", summary, "--inject", "kill:worker:1@step=10"},
                                 {60.0, ""});
  INFO(describe(r));
  CHECK(r.exit_code != 0);
  const json launch = read_json_file(summary);
  CHECK(launch["exit_codes"]["worker:0"] == 4);
  CHECK(launch["exit_codes"]["worker:2"] == 4);
  for (const char* task : {"worker-0", "worker-2"}) {
    const std::string log = read_file(dir.file(std::string("out/logs/") + task + ".log"));
    INFO(log);
    CHECK(log.find("task worker:1") != std::string::npos);
    CHECK(log.find("was lost") != std::string::npos);
  }
  CHECK(r.seconds < 30.0);
}

TEST_CASE("bad pipeline settings are exit 2 with the fix") {
  struct Case {
    json strategy;
    int tasks;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {{{"type", "pipeline"}, {"stages", {"dense_7"}}}, 2, {"stages[0]: 'dense_7' is not a layer", "flatten, dense"}},
      {{{"type", "pipeline"}, {"stages", {"dense_1", "dense"}}}, 3, {"does not come after the previous boundary"}},
      {{{"type", "pipeline"}, {"stages", {"dense", "dense_1"}}}, 2, {"need a multiple of 3 training tasks", "has 2"}},
      {{{"type", "pipeline"}, {"stages", {"flatten", "dense", "dense_1", "dense_2", "dense_2"}}}, 6,
       {"6 stages but the model has only 4 layers"}},
      {{{"type", "pipeline"}, {"stages", {"dense_1"}}, {"micro_batches", 3}}, 2,
       {"micro_batches: 3 micro-batches do not divide train.batch_size_per_replica 128"}},
  };
  for (const Case& c : cases) {
    INFO(c.strategy.dump());
    TempDir dir;
    json job = mlp(dir, 128);
    job["strategy"] = c.strategy;
    const RunOutput r = run_dtrain({"launch", "--workers", std::to_string(c.tasks), "--config", write_job(dir, job),
                                    "--threads", "1"},
                                   {60.0, ""});
    INFO(describe(r));
    CHECK(r.exit_code == 2);
    for (const std::string& needle : c.needles) CHECK(r.err.find(needle) != std::string::npos);
  }
}

TEST_CASE("a model over runtime.memory_limit under one_device trains as a 4-stage pipeline and under ZeRO-1") {
  // 784 -> 3 x Dense(4096) -> Dense(10), Adam: about 571 MiB in one task; a
  // 4096 x 4096 layer with its gradients and slots about 256 MiB.
  const auto wide = [](const TempDir& d) {
    json job = json::parse(R"({
      "model": {"input_shape": [784], "layers": [
        {"type": "Dense", "units": 4096, "activation": "relu"}, {"type": "Dense", "units": 4096, "activation": "relu"},
        {"type": "Dense", "units": 4096, "activation": "relu"}, {"type": "Dense", "units": 10}]},
      "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
      "optimizer": {"type": "adam", "learning_rate": 0.0001},
      "data": {"train": {"format": "synthetic", "shape": [784], "classes": 10, "count": 512, "seed": 7}},
      "train": {"epochs": 1, "steps_per_epoch": 4, "batch_size_per_replica": 64, "seed": 1, "log_every_steps": 1}})");
    job["output"] = {{"dir", d.file("out")}};
    return job;
  };
  const auto final_loss = [](const TempDir& d) {
    double loss = 0.0;
    for (const json& record : read_json_lines(d.file("out/metrics.jsonl")))
      if (record["kind"] == "step") loss = record["loss"].get<double>();
    return loss;
  };
  TempDir unlimited, limited, piped, zero;
  const RunOutput base = run_dtrain({"run", "--config", write_job(unlimited, wide(unlimited)), "--threads", "1"}, {180.0, ""});
  INFO(describe(base));
  REQUIRE(base.exit_code == 0);

  json job = wide(limited);
  job["runtime"] = {{"memory_limit", "400MiB"}};
  const RunOutput refused = run_dtrain({"run", "--config", write_job(limited, job), "--threads", "1"}, {60.0, ""});
  check_error(refused, 2, {"runtime.memory_limit", "571.0 MiB", "pipeline", "strategy.shard (\"optimizer_state\""});

  job["output"]["dir"] = piped.file("out");
  job["strategy"] = {{"type", "pipeline"}, {"stages", "auto"}};
  const RunOutput p = run_dtrain({"launch", "--workers", "4", "--config", write_job(piped, job), "--threads", "1",
                                  "--summary", piped.file("launch.json")},
                                 {240.0, ""});
  INFO(describe(p));
  REQUIRE(p.exit_code == 0);
  // "auto" could not measure the whole model in one task under the limit: split by parameter bytes.
  const json stage = read_json_file(piped.file("launch.json"))["tasks"]["worker:1"];
  CHECK(stage["pipeline"]["split_how"] == "auto: parameter bytes");
  CHECK(stage["pipeline"]["split"] == "dense | dense_1 | dense_2 | dense_3");
  CHECK(stage["memory"]["total"].get<int64_t>() < 400 << 20);
  CHECK(std::fabs(final_loss(piped) - final_loss(unlimited)) <= 1e-4 * final_loss(unlimited));

  job["output"]["dir"] = zero.file("out");
  job["strategy"] = {{"type", "multi_worker_mirrored"}, {"shard_optimizer_state", true}};
  job["train"]["batch_size_per_replica"] = 16;
  const RunOutput z = run_dtrain({"launch", "--workers", "4", "--config", write_job(zero, job), "--threads", "1"},
                                 {240.0, ""});
  INFO(describe(z));
  REQUIRE(z.exit_code == 0);
  CHECK(std::fabs(final_loss(zero) - final_loss(unlimited)) <= 1e-4 * final_loss(unlimited));
}
