// A tiny GPT (job_files.h's tiny_gpt_job: token and position embedding, two
// pre-norm TransformerDecoder blocks, layer norm, Dense(256) over 16 byte tokens)
// under every strategy through the dtrain binary, each against one_device as the
// MLP and CNN tests do: mirrored, multi_worker_mirrored and ZeRO-1 follow its
// per-token loss step by step within 1e-4 (ZeRO-1 the unsharded run within 1e-5,
// with half the optimizer state per task); pipelines cut at the blocks (and
// "auto") follow it within 1e-4 and end with exactly the parameters of
// one_device accumulating the same micro-batches; parameter_server sync follows
// it (its epoch and test losses), async learns; mixed_bfloat16 follows float32
// within the bfloat16 layer tests' 2% and its pipeline is bit-identical to its
// accumulation; a run killed mid-epoch and resumed ends with the uninterrupted
// run's parameters (multi_worker_mirrored, pipeline, ZeRO-1); 2 pipeline stages
// x 2 tensor parts follow one_device and checkpoint whole tensors. `validate` shows
// the pipeline split at block boundaries and the memory estimate's attention.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "support/free_port.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

constexpr int kSteps = 12;

json gpt(const TempDir& dir, int batch_per_replica, const json& strategy = {{"type", "one_device"}}) {
  json job = tiny_gpt_job(dir, kSteps);
  job["train"]["batch_size_per_replica"] = batch_per_replica;
  job["strategy"] = strategy;
  return job;
}

struct Result {
  std::vector<double> losses;  // per token, one a step
  std::string hash;
  json summary;  // the chief's (or the single task's)
};

Result run_single(const json& job, const TempDir& dir, const std::vector<std::string>& extra = {}) {
  const std::string summary = dir.file("summary.json");
  std::vector<std::string> args = {"run", "--config", write_job(dir, job), "--threads", "1", "--summary", summary};
  args.insert(args.end(), extra.begin(), extra.end());
  const RunOutput r = run_dtrain(args, {120.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const json s = read_json_file(summary);
  return {step_losses(dir, kSteps), s["params_sha256"], s};
}

// one_device on the global batch of 16, or with K accumulation steps of 16 / K.
Result one_device(const TempDir& dir, int accumulation = 1, const std::string& precision = "float32") {
  json job = gpt(dir, 16 / accumulation);
  job["train"]["gradient_accumulation_steps"] = accumulation;
  job["train"]["precision"] = precision;
  return run_single(job, dir);
}

// `workers` training tasks under `dtrain launch` (every task ends with the same
// parameters: launch_job checks); the chief worker:0's figures.
Result launched(const json& job, int workers, const TempDir& dir) {
  const json launch = launch_job(dir, job, workers);
  const json& chief = launch["tasks"]["worker:0"];
  return {step_losses(dir, kSteps), chief["params_sha256"], chief};
}

}  // namespace

TEST_CASE("tiny GPT: mirrored, multi_worker_mirrored and ZeRO-1 follow one_device step by step") {
  TempDir one, mirrored, two, four, sharded;
  const Result base = one_device(one);
  CHECK(base.losses.back() < base.losses.front() - 1.0);  // it learns
  CHECK(base.summary["tokens_per_sample"] == 16);

  json job = gpt(mirrored, 8, {{"type", "mirrored"}, {"replicas", 2}});
  require_close(run_single(job, mirrored).losses, base.losses, 1e-4, "mirrored x2");

  const Result mwm = launched(gpt(two, 8, {{"type", "multi_worker_mirrored"}}), 2, two);
  require_close(mwm.losses, base.losses, 1e-4, "2 workers");
  require_close(launched(gpt(four, 4, {{"type", "multi_worker_mirrored"}}), 4, four).losses, base.losses, 1e-4,
                "4 workers");

  const json zero = {{"type", "multi_worker_mirrored"}, {"shard_optimizer_state", true}};
  const json launch = launch_job(sharded, gpt(sharded, 8, zero), 2);
  require_close(step_losses(sharded, kSteps), mwm.losses, 1e-5, "ZeRO-1 vs unsharded");
  require_close(step_losses(sharded, kSteps), base.losses, 1e-4, "ZeRO-1 vs one_device");
  // Adam's m and v of the 13,184 parameters, split in two.
  const int64_t whole = mwm.summary["optimizer_state_bytes"];
  CHECK(whole == 2 * 4 * 13184);
  int64_t total = 0;
  for (const char* task : {"worker:0", "worker:1"}) {
    const int64_t bytes = launch["tasks"][task]["optimizer_state_bytes"];
    CHECK(std::fabs(static_cast<double>(bytes) - whole / 2.0) < 0.01 * whole);
    total += bytes;
  }
  CHECK(total == whole);
}

TEST_CASE("tiny GPT under tensor_parallel 2 and 4, and 2 data x 2 tensor, follows one_device step by step") {
  TempDir one;
  const Result base = one_device(one);
  for (const int t : {2, 4}) {
    INFO("tensor_parallel " << t);
    TempDir split;
    const json job = gpt(split, 16, {{"type", "multi_worker_mirrored"}, {"tensor_parallel", t}});
    // 2 heads split 2 ways, not 4: at 4 the attention stays whole and the feed-forward pairs split.
    const RunOutput v = run_dtrain({"validate", "--config", write_job(split, job, "validate.json")}, {60.0, ""});
    const std::string heads = t == 2 ? "transformer_decoder/self_attention (heads), " : "";
    CHECK_THAT(v.out, Catch::Contains("tensor split: token_and_position_embedding (vocabulary), " + heads +
                                      "transformer_decoder/feedforward_intermediate_dense (columns), "
                                      "transformer_decoder/feedforward_output_dense (rows)"));
    // The output layer by its 256 classes: the logits are never gathered.
    CHECK_THAT(v.out, Catch::Contains("dense (classes, vocabulary-parallel loss); whole on every task: "
                                      "layer_normalization"));
    const Result r = launched(job, t, split);
    require_close(r.losses, base.losses, 1e-4, "tensor_parallel " + std::to_string(t));
    CHECK(r.summary["optimizer_state_bytes"].get<int64_t>() < base.summary["optimizer_state_bytes"].get<int64_t>());
  }
  // 2 data x 2 tensor: two copies of 8 rows each.
  TempDir grid;
  const Result r = launched(gpt(grid, 8, {{"type", "multi_worker_mirrored"}, {"tensor_parallel", 2}}), 4, grid);
  require_close(r.losses, base.losses, 1e-4, "2 data x 2 tensor");
}

TEST_CASE("tiny GPT as 2 pipeline stages x 2 tensor parts follows one_device, and its checkpoint resumes under "
          "one_device, tensor_parallel 2 and ZeRO-3 with the same params_sha256") {
  TempDir one, grid;
  const Result base = one_device(one);
  json job = gpt(grid, 16, {{"type", "pipeline"}, {"stages", {"transformer_decoder_1"}}, {"tensor_parallel", 2}});
  job["checkpoint"] = {{"dir", grid.file("ckpt")}, {"every_epochs", 1}};
  // The first stage splits its token table and its block; the second its block
  // and the 256-way output (the vocabulary-parallel loss on the last stage).
  const RunOutput v = run_dtrain({"validate", "--config", write_job(grid, job, "validate.json")}, {60.0, ""});
  CHECK_THAT(v.out, Catch::Contains("tensor split: token_and_position_embedding (vocabulary), "
                                    "transformer_decoder/self_attention (heads)") &&
                        Catch::Contains("dense (classes, vocabulary-parallel loss)"));
  const json launch = launch_job(grid, job, 4);
  require_close(step_losses(grid, kSteps), base.losses, 1e-4, "2 pipeline x 2 tensor");
  const json& last = launch["tasks"]["worker:3"]["pipeline"];
  CHECK(last["stage"] == 1);
  CHECK(last["tensor"] == 1);
  CHECK(last["split"] == "token_and_position_embedding..transformer_decoder | transformer_decoder_1..dense");
  CHECK_THAT(read_file(grid.file("out/logs/worker-0.log")),
             Catch::Contains("1 data x 2 pipeline x 2 tensor: 1 copy of the model, each stage held by 2 tasks"));
  const std::string saved = common_params_hash(launch);
  const std::vector<std::pair<json, int>> layouts = {
      {{{"type", "one_device"}}, 1},
      {{{"type", "multi_worker_mirrored"}, {"tensor_parallel", 2}}, 2},
      {{{"type", "multi_worker_mirrored"}, {"shard", "parameters"}}, 3}};
  for (const auto& [strategy, tasks] : layouts) {
    INFO("resumed under " << strategy.dump());
    TempDir again;
    std::filesystem::copy(grid.file("ckpt"), again.file("ckpt"), std::filesystem::copy_options::recursive);
    json resume = gpt(again, 16, strategy);  // its one epoch is done: the checkpoint's parameters
    resume["checkpoint"] = {{"dir", again.file("ckpt")}, {"every_epochs", 1}, {"resume", "auto"}};
    CHECK(common_params_hash(launch_job(again, resume, tasks)) == saved);
  }
}

TEST_CASE("tiny GPT under ZeRO-2 and ZeRO-3 on 2 and 4 tasks follows one_device step by step") {
  TempDir one;
  const Result base = one_device(one);
  for (const std::string shard : {"gradients", "parameters"})
    for (const int tasks : {2, 4}) {
      INFO("shard " << shard << " on " << tasks << " tasks");
      TempDir dir;
      const Result r = launched(gpt(dir, 16 / tasks, {{"type", "multi_worker_mirrored"}, {"shard", shard}}), tasks, dir);
      require_close(r.losses, base.losses, 1e-4, "ZeRO " + shard);
      CHECK(r.summary["optimizer_state_bytes"].get<int64_t>() <
            base.summary["optimizer_state_bytes"].get<int64_t>() * 6 / (tasks * 5));
    }
}

TEST_CASE("tiny GPT checkpoints reshard: tensor_parallel 2 (vocabulary split) to one_device and ZeRO-3, ZeRO-3 to "
          "tensor_parallel and a pipeline, each with the same params_sha256") {
  const auto with_checkpoints = [](const TempDir& dir, int batch, const json& strategy) {
    json job = gpt(dir, batch, strategy);
    job["checkpoint"] = {{"dir", dir.file("ckpt")}, {"every_epochs", 1}};
    return job;
  };
  const json tensor = {{"type", "multi_worker_mirrored"}, {"tensor_parallel", 2}};
  const json zero3 = {{"type", "multi_worker_mirrored"}, {"shard", "parameters"}};
  TempDir from_tensor, from_zero;
  const std::string tensor_saved = common_params_hash(launch_job(from_tensor, with_checkpoints(from_tensor, 16, tensor), 2));
  const std::string zero_saved = common_params_hash(launch_job(from_zero, with_checkpoints(from_zero, 4, zero3), 4));
  struct Resume {
    const TempDir* from;
    std::string saved;
    json strategy;
    int tasks, batch;
  };
  const std::vector<Resume> resumes = {{&from_tensor, tensor_saved, {{"type", "one_device"}}, 1, 16},
                                       {&from_tensor, tensor_saved, zero3, 2, 8},
                                       {&from_zero, zero_saved, tensor, 2, 16},
                                       {&from_zero, zero_saved, {{"type", "pipeline"}, {"stages", {"transformer_decoder_1"}}}, 2, 16}};
  for (const Resume& r : resumes) {
    INFO("resumed under " << r.strategy.dump() << " on " << r.tasks << " tasks");
    TempDir again;
    std::filesystem::copy(r.from->file("ckpt"), again.file("ckpt"), std::filesystem::copy_options::recursive);
    json job = with_checkpoints(again, r.batch, r.strategy);  // its one epoch is done: the checkpoint's parameters
    job["checkpoint"]["resume"] = "auto";
    CHECK(common_params_hash(launch_job(again, job, r.tasks)) == r.saved);
  }
}

TEST_CASE("tiny GPT pipelines cut at the TransformerDecoder blocks, and auto, give one_device's losses and its accumulated parameters") {
  TempDir one, accumulated;
  const Result base = one_device(one);
  const Result acc = one_device(accumulated, 4);  // a pipeline's 4 micro-batches
  struct Case {
    json strategy;
    int tasks;
    std::string split;
  };
  const std::vector<Case> cases = {
      {{{"type", "pipeline"}, {"stages", {"transformer_decoder_1"}}, {"schedule", "1f1b"}},
       2,
       "token_and_position_embedding..transformer_decoder | transformer_decoder_1..dense"},
      {{{"type", "pipeline"},
        {"stages", {"transformer_decoder", "transformer_decoder_1", "layer_normalization"}},
        {"schedule", "gpipe"}},
       4,
       "token_and_position_embedding | transformer_decoder | transformer_decoder_1 | layer_normalization..dense"},
  };
  for (const Case& c : cases) {
    INFO(c.strategy.dump());
    TempDir dir;
    const Result p = launched(gpt(dir, 16, c.strategy), c.tasks, dir);
    require_close(p.losses, base.losses, 1e-4, "pipeline vs one_device");
    CHECK(p.hash == acc.hash);
    CHECK(p.summary["pipeline"]["stages"] == c.tasks);
    CHECK(p.summary["pipeline"]["split"] == c.split);
  }

  // auto: the chief times each layer (on token ids its embedding takes) and cuts
  // between whole layers, so at block boundaries.
  TempDir dir;
  const Result p = launched(gpt(dir, 16, {{"type", "pipeline"}, {"stages", "auto"}}), 3, dir);
  require_close(p.losses, base.losses, 1e-4, "auto pipeline vs one_device");
  CHECK(p.hash == acc.hash);
  CHECK(p.summary["pipeline"]["split_how"] == "auto: measured time");
  const std::string split = p.summary["pipeline"]["split"];
  CHECK(std::count(split.begin(), split.end(), '|') == 2);
  CHECK_THAT(read_file(dir.file("out/logs/worker-0.log")),
             Catch::Contains("pipeline: 3 stages x 1 copy (auto: measured time): " + split));
}

TEST_CASE("tiny GPT: validate prints the pipeline's split at the blocks and a memory estimate that counts attention") {
  TempDir dir;
  // Attention keeps q, k, v, its output and each row's log-sum-exp, no (T, T) scores:
  // each block 470 KiB at batch 16 (tests/unit/strategy/test_memory_estimate.cpp to the byte).
  const RunOutput whole = run_dtrain({"validate", "--config", write_job(dir, gpt(dir, 16))});
  INFO(describe(whole));
  REQUIRE(whole.exit_code == 0);
  CHECK_THAT(whole.out, Catch::Contains("activations 768.0 KiB, backward buffers 768.0 KiB") &&
                            Catch::Contains("transformer_decoder (TransformerDecoder) 470.0 KiB of activations"));

  // Task worker:0 of a 2-stage pipeline (its own port must be free; the other is not bound).
  const int port = dtrain::test::free_port();
  json job = gpt(dir, 16, {{"type", "pipeline"}, {"stages", {"transformer_decoder_1"}}});
  job["cluster"] = {{"worker", {"127.0.0.1:" + std::to_string(port), "127.0.0.1:" + std::to_string(port + 1)}}};
  const RunOutput stage =
      run_dtrain({"validate", "--config", write_job(dir, job, "pipeline.json"), "--task", "worker:0"});
  INFO(describe(stage));
  REQUIRE(stage.exit_code == 0);
  CHECK_THAT(stage.out,
             Catch::Contains("pipeline split: token_and_position_embedding..transformer_decoder | "
                             "transformer_decoder_1..dense (strategy.stages)") &&
                 Catch::Contains("Pipeline stage 0 of 2: layers token_and_position_embedding..transformer_decoder"));

  // A stage cannot begin inside a block.
  job["strategy"]["stages"] = {"transformer_decoder/feedforward_block"};
  check_error(run_dtrain({"validate", "--config", write_job(dir, job, "inside.json"), "--task", "worker:0"}), 2,
              {"strategy.stages[0]: 'transformer_decoder/feedforward_block' is not a layer of the model",
               "transformer_decoder, transformer_decoder_1"});
}

TEST_CASE("tiny GPT under parameter_server: sync follows one_device, async learns") {
  TempDir one;
  const Result base = one_device(one);
  const auto run_ps = [](const TempDir& dir, const std::string& mode) {
    // One step per work unit: many units, each worker's results collected per unit.
    json job = gpt(dir, 8, {{"type", "parameter_server"}, {"mode", mode}, {"steps_per_work_unit", 1}});
    const std::string summary = dir.file("launch.json");
    const RunOutput r = run_dtrain({"launch", "--workers", "2", "--chief", "--ps", "1", "--config", write_job(dir, job),
                                    "--threads", "1", "--summary", summary},
                                   {180.0, ""});
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    const json launch = read_json_file(summary);
    for (const char* worker : {"worker:0", "worker:1"}) CHECK(launch["tasks"][worker]["steps"].get<int>() > 0);
    return launch["tasks"]["chief:0"];
  };

  // sync: a round is one batch of 8 from each worker's shard, multi_worker_mirrored's
  // global batch of 16. Its step records hold the units finished since the record
  // before, so the epoch's loss (every unit's, every worker's) is compared.
  TempDir sync_dir;
  const json sync = run_ps(sync_dir, "sync");
  INFO(sync.dump(2));
  CHECK(sync["steps"] == kSteps);
  CHECK(sync["train_loss"].get<double>() == Approx(base.summary["train_loss"].get<double>()).epsilon(1e-4));
  CHECK(sync["test_loss"].get<double>() == Approx(base.summary["test_loss"].get<double>()).epsilon(1e-4));

  // async: every push applied as it arrives; from a uniform guess (log 256 = 5.5) down.
  TempDir async_dir;
  const json async = run_ps(async_dir, "async");
  INFO(async.dump(2));
  CHECK(async["work_units"]["completed"] == async["work_units"]["total"]);
  CHECK(base.losses.front() > std::log(256.0) - 0.5);
  CHECK(async["test_loss"].get<double>() < std::log(256.0) - 1.5);
}

TEST_CASE("tiny GPT in mixed_bfloat16 follows float32, and its pipeline and workers follow bfloat16 one_device", "[bf16]") {
  TempDir f32_dir, bf16_dir, accumulated, pipe, workers;
  const Result f32 = one_device(f32_dir);
  const Result bf16 = one_device(bf16_dir, 1, "mixed_bfloat16");
  CHECK(bf16.summary["precision"] == "mixed_bfloat16");
  // The last Dense computed in bfloat16; the blocks' attention and Dense layers
  // took their products in bfloat16 (layer norm, softmax and gelu in float32).
  CHECK(bf16.hash != f32.hash);
  // The bfloat16 layer tests' tolerance on a model's outputs (tests/unit/nn/test_layers.cpp).
  require_close(bf16.losses, f32.losses, 0.02, "mixed_bfloat16 vs float32");
  CHECK(bf16.losses.back() < bf16.losses.front() - 1.0);

  const Result acc = one_device(accumulated, 4, "mixed_bfloat16");
  json job = gpt(pipe, 16, {{"type", "pipeline"}, {"stages", {"transformer_decoder_1"}}});
  job["train"]["precision"] = "mixed_bfloat16";
  const Result p = launched(job, 2, pipe);
  require_close(p.losses, acc.losses, 1e-4, "bfloat16 pipeline vs accumulation");
  CHECK(p.hash == acc.hash);

  job = gpt(workers, 8, {{"type", "multi_worker_mirrored"}});
  job["train"]["precision"] = "mixed_bfloat16";
  // 1e-3, not float32's 1e-4: the workers' summed gradients differ from one
  // device's in the last float32 bits, and where such a difference moves a
  // weight across a bfloat16 rounding boundary its copy (every block's kernels
  // now) changes by up to 2^-8 of itself (1.1e-4 of the loss seen at step 12 in
  // an ASan build). Still far inside the 2% between bfloat16 and float32.
  require_close(launched(job, 2, workers).losses, bf16.losses, 1e-3, "bfloat16 on 2 workers vs one_device");
}

TEST_CASE("tiny GPT: a run killed mid-epoch and resumed ends with the uninterrupted run's parameters") {
  const std::vector<json> strategies = {
      {{"type", "multi_worker_mirrored"}},
      {{"type", "pipeline"}, {"stages", {"transformer_decoder_1"}}},
      {{"type", "multi_worker_mirrored"}, {"shard_optimizer_state", true}},
  };
  for (const json& strategy : strategies) {
    INFO(strategy.dump());
    // 3 epochs of 12 steps, a checkpoint every 10 steps; global batch 16.
    const auto job_in = [&](const TempDir& dir) {
      json job = gpt(dir, strategy["type"] == "pipeline" ? 16 : 8, strategy);
      job["train"]["epochs"] = 3;
      job["checkpoint"] = {{"dir", dir.file("ckpt")}, {"every_steps", 10}};
      return job;
    };
    TempDir straight, interrupted;
    const std::string expected = common_params_hash(launch_job(straight, job_in(straight), 2));

    const std::string config = write_job(interrupted, job_in(interrupted));
    // Step 17 is in the middle of epoch 2; the newest checkpoint then is step 10's, in epoch 1.
    const RunOutput killed = run_dtrain(
        {"launch", "--workers", "2", "--config", config, "--threads", "1", "--inject", "kill:worker:1@step=17"},
        {180.0, ""});
    INFO(describe(killed));
    REQUIRE(killed.exit_code != 0);
    REQUIRE(std::filesystem::exists(interrupted.file("ckpt/ckpt-00000010/DONE")));
    const std::string summary = interrupted.file("resumed.json");
    const RunOutput resumed = run_dtrain({"launch", "--workers", "2", "--config", config, "--threads", "1", "--set",
                                          "checkpoint.resume=auto", "--summary", summary},
                                         {180.0, ""});
    INFO(describe(resumed));
    REQUIRE(resumed.exit_code == 0);
    CHECK_THAT(resumed.err, Catch::Contains("resumed from") && Catch::Contains("ckpt-00000010"));
    CHECK(common_params_hash(read_json_file(summary)) == expected);
  }
}
