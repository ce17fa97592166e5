// strategy.tensor_parallel end to end under `dtrain launch`: the shipped MLP
// (Flatten, Dense 256 relu, Dense 128 relu, Dense 10) split over 2 and 4 tasks
// (dense by columns, dense_1 by rows), 2 data-parallel copies of 2, and 2
// pipeline stages of 2, follows one_device step by step, every
// task ends with the same whole-model hash, and each holds its part of the
// optimizer state; its checkpoints resume under one_device, at another
// tensor_parallel, as a pipeline (of 2 x 2 too) and under ZeRO-1 and ZeRO-3 with the identical
// params_sha256 and export whole, and a resumed run ends exactly where the
// uninterrupted one does.
#include <catch2/catch.hpp>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

// The shipped MLP (Adam) on 4096 samples at a global batch of 128 over the
// copies (`copies` x tensor_parallel tasks), 10 steps an epoch, a loss record
// every step, a checkpoint every epoch.
json mlp_job(const TempDir& dir, int tensor_parallel, int epochs = 1, int copies = 1) {
  json job = stepwise_mlp_job(dir, 128 / copies, epochs);
  job["strategy"] = tensor_parallel > 1 ? json{{"type", "multi_worker_mirrored"}, {"tensor_parallel", tensor_parallel}}
                                        : json{{"type", "one_device"}};
  return job;
}

// Adam's m and v of the MLP, each task's part: dense's kernel and bias and
// dense_1's kernel split `t` ways, dense_1's bias whole, and the output layer
// dense_2 split by its 10 classes where `t` divides them (else whole).
int64_t optimizer_bytes(int t) {
  const int64_t output = 128 * 10 + 10;
  return 2 * 4 * ((784 * 256 + 256 + 256 * 128) / t + 128 + (10 % t == 0 ? output / t : output));
}

}  // namespace

TEST_CASE("tensor_parallel on 2 and 4 tasks, and 2 copies of 2, follows one_device and holds its part of the state",
          "[integration]") {
  TempDir whole;
  launch_job(whole, mlp_job(whole, 1), 1);
  const std::vector<double> want = step_losses(whole, 10);
  for (const auto& [t, copies] : {std::pair{2, 1}, std::pair{4, 1}, std::pair{2, 2}}) {
    INFO(copies << " copies of tensor_parallel " << t);
    TempDir split;
    const json s = launch_job(split, mlp_job(split, t, 1, copies), t * copies);
    require_close(step_losses(split, 10), want, 1e-4, "tensor_parallel vs one_device");
    // The runtime built the grid's groups once; on one machine the copies' and the parts' are shared memory.
    CHECK_THAT(read_file(split.file("out/logs/worker-0.log")),
               Catch::Contains(copies == 1 ? "data: one task, tensor: workers"
                                           : "data: shared memory (2 tasks), tensor: shared memory (2 tasks)"));
    for (const auto& [task, summary] : s["tasks"].items()) {
      INFO(task);
      CHECK(summary["optimizer_state_bytes"] == optimizer_bytes(t));
      CHECK(summary["global_batch_size"] == 128);
    }
  }
  // 2 pipeline stages x 2 tensor parts: the first stage's pair split by columns
  // and rows, the second stage's output layer by its 10 classes (the
  // vocabulary-parallel loss on the last stage).
  TempDir grid;
  json job = mlp_job(grid, 1);
  job["strategy"] = {{"type", "pipeline"}, {"stages", {"dense_2"}}, {"tensor_parallel", 2}};
  const RunOutput v = run_dtrain({"validate", "--config", write_job(grid, job, "validate.json")}, {60.0, ""});
  CHECK_THAT(v.out, Catch::Contains("tensor split: dense (columns), dense_1 (rows), dense_2 (classes, "
                                    "vocabulary-parallel loss)") &&
                        Catch::Contains("tasks hold each pipeline stage"));
  const json s = launch_job(grid, job, 4);
  require_close(step_losses(grid, 10), want, 1e-4, "2 pipeline x 2 tensor vs one_device");
  CHECK(s["tasks"]["worker:3"]["pipeline"]["stage"] == 1);
  CHECK(s["tasks"]["worker:3"]["pipeline"]["tensor"] == 1);
  CHECK(s["tasks"]["worker:0"]["optimizer_state_bytes"] == 2 * 4 * (784 * 256 + 256 + 256 * 128) / 2 + 2 * 4 * 128);

  // On 8 tasks without data_parallel, the rest of the tasks are copies: 2 data x
  // 2 pipeline x 2 tensor, 64 rows a copy.
  TempDir cube;
  json eight = mlp_job(cube, 1, 1, 2);
  eight["strategy"] = {{"type", "pipeline"}, {"stages", {"dense_2"}}, {"tensor_parallel", 2}};
  const json c = launch_job(cube, eight, 8);
  require_close(step_losses(cube, 10), want, 1e-4, "2 data x 2 pipeline x 2 tensor vs one_device");
  CHECK(c["tasks"]["worker:7"]["pipeline"]["data_parallel"] == 2);
  CHECK(c["tasks"]["worker:7"]["pipeline"]["copy"] == 1);
  CHECK(c["tasks"]["worker:7"]["global_batch_size"] == 128);
  CHECK_THAT(read_file(cube.file("out/logs/worker-0.log")),
             Catch::Contains("2 data x 2 pipeline x 2 tensor: 2 copies of the model, each stage held by 2 tasks") &&
                 Catch::Contains("pipeline: split of workers (2 tasks), data: shared memory (2 tasks), "
                                 "tensor: shared memory (2 tasks)"));
}

TEST_CASE("tensor_parallel checkpoints resume under one_device and another split with the same parameters, "
          "and a resumed run ends where the uninterrupted one does",
          "[integration]") {
  TempDir first;
  const std::string saved = common_params_hash(launch_job(first, mlp_job(first, 2), 2));
  for (const int t : {1, 4}) {
    INFO("resumed at tensor_parallel " << t);
    TempDir again;
    std::filesystem::copy(first.file("ckpt"), again.file("ckpt"), std::filesystem::copy_options::recursive);
    json job = mlp_job(again, t);  // its one epoch is done: the report is of the checkpoint's parameters
    job["checkpoint"]["resume"] = "auto";
    CHECK(common_params_hash(launch_job(again, job, t)) == saved);
  }
  // 2 copies of 2 write their checkpoint (the first copy's tasks the parts); it
  // resumes under one_device, a pipeline of 2 stages, ZeRO-1 and ZeRO-3 on 3
  // tasks with the same parameters, and exports whole.
  TempDir grid;
  const std::string grid_saved = common_params_hash(launch_job(grid, mlp_job(grid, 2, 1, 2), 4));
  const std::vector<std::pair<json, int>> layouts = {
      {{{"type", "one_device"}}, 1},
      {{{"type", "pipeline"}, {"stages", {"dense_1"}}}, 2},
      {{{"type", "multi_worker_mirrored"}, {"shard_optimizer_state", true}}, 3},
      {{{"type", "multi_worker_mirrored"}, {"shard", "parameters"}}, 3},
      {{{"type", "pipeline"}, {"stages", {"dense_2"}}, {"tensor_parallel", 2}}, 4}};
  for (const auto& [strategy, tasks] : layouts) {
    INFO("resumed under " << strategy.dump());
    TempDir again;
    std::filesystem::copy(grid.file("ckpt"), again.file("ckpt"), std::filesystem::copy_options::recursive);
    json resume = mlp_job(again, 1);
    resume["strategy"] = strategy;
    resume["train"]["batch_size_per_replica"] = 128 / (strategy["type"] == "multi_worker_mirrored" ? 1 : tasks);
    resume["checkpoint"]["resume"] = "auto";
    CHECK(common_params_hash(launch_job(again, resume, tasks)) == grid_saved);
  }
  const std::string exported = grid.file("model.safetensors");
  const RunOutput e = run_dtrain({"ckpt", "export", grid.file("ckpt"), "--to", exported}, {60.0, ""});
  INFO(describe(e));
  CHECK(e.exit_code == 0);
  CHECK(std::filesystem::file_size(exported) > 4u * (784 * 256 + 256 * 128 + 128 * 10));

  // 2 epochs straight, against 1 then resumed for the second (the optimizer's slots too).
  TempDir straight, resumed;
  const std::string end = common_params_hash(launch_job(straight, mlp_job(straight, 2, 2), 2));
  std::filesystem::copy(first.file("ckpt"), resumed.file("ckpt"), std::filesystem::copy_options::recursive);
  json job = mlp_job(resumed, 2, 2);
  job["checkpoint"]["resume"] = "auto";
  CHECK(common_params_hash(launch_job(resumed, job, 2)) == end);
}

TEST_CASE("tensor_parallel that does not divide the tasks, or in mixed precision, is exit 2 before training",
          "[integration]") {
  TempDir dir;
  json job = mlp_job(dir, 2);
  const RunOutput three = run_dtrain({"launch", "--workers", "3", "--config", write_job(dir, job, "three.json"),
                                      "--threads", "1"},
                                     {60.0, ""});
  CHECK(three.exit_code == 2);
  CHECK_THAT(three.err, Catch::Contains("strategy.tensor_parallel: 2 tasks hold each copy of the model") &&
                            Catch::Contains("use a divisor of 3"));
  CHECK_THAT(three.err, !Catch::Contains("Epoch 1/"));
  job["train"]["precision"] = "mixed_bfloat16";
  const RunOutput mixed = run_dtrain({"launch", "--workers", "2", "--config", write_job(dir, job, "mixed.json"),
                                      "--threads", "1"},
                                     {60.0, ""});
  CHECK(mixed.exit_code == 2);
  CHECK_THAT(mixed.err, Catch::Contains("computes in float32 only so far"));
}
