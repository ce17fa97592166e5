// Several GPUs in one process: the CUDA backend's per-GPU contexts (tensors on
// two GPUs, copies between them, the same op issued from a thread per GPU at
// once, as mirrored's replicas do) and `mirrored` with one replica per GPU,
// whose gradients meet in a local NCCL group (builds with NCCL) or in shared
// memory through host copies (communication "ring"): both follow one_device on
// one GPU at the same global batch. Over NCCL, loss scaling (an inf in one
// replica's rows skips the step on both) and bfloat16 gradients. With one GPU,
// mirrored asking for two is a clear exit 2. Labelled gpu: skipped (reported as
// skipped) without the GPUs.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <thread>

#include "comm/nccl/nccl_support.h"
#include "gpu/gpu_skip.h"
#include "gpu/nccl_skip.h"
#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "strategy/registry.h"
#include "support/tiny_dense_job.h"
#include "unit/tensor_checks.h"

namespace dtrain::integration {
namespace {

// The MLP job at a global batch of 256 on "gpu": one_device, or mirrored with
// 2 replicas of 128 over `communication`.
nlohmann::json job_for(const TempDir& dir, const std::string& tag, int replicas, const std::string& communication) {
  nlohmann::json job = small_mlp_job(2048, 512);
  job["device"] = "gpu";
  job["train"]["epochs"] = 2;
  job["train"]["log_every_steps"] = 1;
  job["train"]["batch_size_per_replica"] = 256 / replicas;
  job["strategy"] = {{"type", replicas > 1 ? "mirrored" : "one_device"}};
  if (replicas > 1) {
    job["strategy"]["replicas"] = replicas;
    job["strategy"]["communication"] = communication;
    job["strategy"]["bytes_per_pack"] = 16384;  // several buckets
  }
  job["output"]["dir"] = dir.file("out-" + tag);
  return job;
}

// The tiny job as mirrored on cuda:0 and cuda:1 in this process, with loss
// scaling; runs the steps `batches` (8 rows each: replica 1 takes rows 4-7) and
// returns the parameters' hash and the scale after each. Replica 1's rows of
// step `poisoned` hold an inf (-1: never).
std::pair<std::vector<std::string>, std::vector<double>> mirrored_steps(const std::vector<int64_t>& batches,
                                                                        int64_t poisoned, const std::string& extra) {
  const job::JobConfig job = test::tiny_dense_job("mirrored", R"(, "replicas": 2)" + extra);
  strategy::StrategyContext context{nullptr, 1};
  context.device = kernels::select_device("cuda:0");
  context.replicas = {Device::cuda(0), Device::cuda(1)};  // the plan's: one GPU per replica
  context.local_nccl = comm::kNcclBuilt;                  // the plan's local group on GPUs
  context.loss_scaling = true;
  auto s = strategy::make_strategy(job.strategy_job(), context);
  std::vector<std::string> hashes;
  std::vector<double> scales;
  for (size_t step = 0; step < batches.size(); ++step) {
    data::Batch b = test::tiny_dense_batch(batches[step], 0, 8);
    if (static_cast<int64_t>(step) == poisoned) b.images.data()[5 * 6] = std::numeric_limits<float>::infinity();
    nn::LossStats stats;
    s->train_step({b}, static_cast<int64_t>(step), stats);
    hashes.push_back(s->model().params_sha256());
    scales.push_back(s->loss_scale()->scale());
  }
  return {hashes, scales};
}

RunOutput train(const TempDir& dir, const nlohmann::json& job, const std::string& tag) {
  return run_dtrain({"run", "--config", write_job(dir, job, "job-" + tag + ".json"), "--summary",
                     dir.file("summary-" + tag + ".json")});
}

}  // namespace

TEST_CASE("tensors on two GPUs of one process: copies between them, an op from a thread per GPU", "[gpu]") {
  if (!testing::two_gpus_or_skip("one per replica")) return;
  kernels::select_device("cuda:1");  // the second GPU of this process
  const Tensor x = testing::random_tensor({64, 300}, 1), w = testing::random_tensor({300, 70}, 2), b = testing::random_tensor({70}, 3);
  Tensor expected({64, 70});
  kernels::dense_forward(x, w, &b, kernels::Activation::kRelu, expected);
  // Between GPUs, both ways, and back to the host.
  const Tensor on0 = x.to(Device::cuda(0));
  const Tensor on1 = on0.to(Device::cuda(1));
  CHECK(on1.device() == Device::cuda(1));
  testing::require_close(on1.to(Device::cuda(0)), x, 0.0, 0.0);
  // The same op (one plan per GPU, each with its own bias pointer) from two
  // threads at once, many times: each GPU's result is the CPU's.
  Tensor results[2];
  std::thread threads[2];
  for (int g = 0; g < 2; ++g)
    threads[g] = std::thread([&, g] {
      const Device device = Device::cuda(g);
      kernels::use_device(device);
      const Tensor xg = x.to(device), wg = w.to(device), bg = b.to(device);
      Tensor y({64, 70}, device);
      for (int i = 0; i < 50; ++i) kernels::dense_forward(xg, wg, &bg, kernels::Activation::kRelu, y);
      kernels::synchronize(device);
      results[g] = y;  // freed later on the main thread: back to its own GPU's cache
    });
  for (std::thread& t : threads) t.join();
  for (int g = 0; g < 2; ++g) {
    INFO("cuda:" << g);
    CHECK(results[g].device() == Device::cuda(g));
    testing::require_close(results[g], expected);
  }
}

TEST_CASE("mirrored on two GPUs follows one_device on one GPU at the same global batch", "[gpu]") {
  if (!testing::two_gpus_or_skip("one per replica")) return;
  TempDir dir;
  const RunOutput one = train(dir, job_for(dir, "one", 1, "auto"), "one");
  INFO(describe(one));
  REQUIRE(one.exit_code == 0);
  const auto reference = read_json_lines(dir.file("out-one/metrics.jsonl"));
  // auto: a local NCCL group where the build has NCCL; ring: shared memory through host copies.
  for (const std::string communication : {"auto", "ring"}) {
    const RunOutput two = train(dir, job_for(dir, communication, 2, communication), communication);
    INFO(describe(two));
    REQUIRE(two.exit_code == 0);
    if (communication == "auto" && comm::kNcclBuilt)
      CHECK_THAT(two.err + two.out, Catch::Matchers::Contains("mirrored replicas on 2 GPUs all-reduce with NCCL"));
    const nlohmann::json summary = read_json_file(dir.file("summary-" + communication + ".json"));
    CHECK(summary.at("world_size") == 2);  // replicas in sync
    const auto steps = read_json_lines(dir.file("out-" + communication + "/metrics.jsonl"));
    REQUIRE(steps.size() == reference.size());
    int compared = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (!steps[i].contains("loss") || !reference[i].contains("loss")) continue;
      const double a = reference[i].at("loss").get<double>(), b = steps[i].at("loss").get<double>();
      INFO(communication << ", record " << i << ": one_device " << a << ", mirrored " << b);
      // The mean over 2 x 128 rows is the mean over 256, summed in another order.
      CHECK(std::fabs(a - b) <= 1e-3 * std::fabs(a) + 1e-5);
      ++compared;
    }
    CHECK(compared >= 8);
  }
}

TEST_CASE("mirrored asking for more GPUs than the machine has is a clear exit 2", "[gpu]") {
  if (!testing::gpu_or_skip()) return;
  TempDir dir;
  const int gpus = static_cast<int>(kernels::list_gpus().gpus.size());
  const RunOutput r = train(dir, job_for(dir, "too-many", gpus + 1, "auto"), "too-many");
  INFO(describe(r));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("dtrain: error:") &&
                                Catch::Matchers::Contains("needs cuda:" + std::to_string(gpus) + ", but this machine has"));
}


TEST_CASE("mirrored on two GPUs over NCCL: an inf in one replica's rows skips the step on both", "[gpu]") {
  if (!testing::two_gpus_or_skip("one per replica") || !testing::nccl_or_skip()) return;
  const auto [poisoned, poisoned_scales] = mirrored_steps({0, 1, 2, 3, 4}, 2, "");
  const auto [clean, clean_scales] = mirrored_steps({0, 1, 3, 4}, -1, "");
  CHECK(poisoned[2] == poisoned[1]);  // skipped: nothing changed
  CHECK(poisoned[3] != poisoned[2]);
  CHECK(poisoned_scales[1] == 32768.0);
  CHECK(poisoned_scales[2] == 16384.0);
  // The skipped step advanced nothing, Adam's step count included.
  CHECK(poisoned[4] == clean[3]);
  CHECK(clean_scales[3] == 32768.0);
}

TEST_CASE("mirrored on two GPUs with bfloat16 gradients on NCCL learns like float32", "[gpu]") {
  if (!testing::two_gpus_or_skip("one per replica") || !testing::nccl_or_skip()) return;
  const auto run = [](const std::string& extra) {
    const job::JobConfig job = test::tiny_dense_job("mirrored", R"(, "replicas": 2)" + extra);
    strategy::StrategyContext context{nullptr, 1};
    context.device = kernels::select_device("cuda:0");
    context.replicas = {Device::cuda(0), Device::cuda(1)};
    context.local_nccl = comm::kNcclBuilt;
    auto s = strategy::make_strategy(job.strategy_job(), context);
    double last = 0.0;
    for (int64_t step = 0; step < 40; ++step) {
      nn::LossStats stats;
      s->train_step({test::tiny_dense_batch(step % 4, 0, 8)}, step, stats);
      last = stats.loss_sum / static_cast<double>(stats.count);
    }
    return std::pair{last, s->model().params_sha256()};
  };
  const auto [f32_loss, f32_hash] = run("");
  const auto [bf16_loss, bf16_hash] = run(R"(, "allreduce_dtype": "bfloat16")");
  INFO("float32 " << f32_loss << ", bfloat16 " << bf16_loss);
  CHECK(f32_hash != bf16_hash);  // the rounding changed something
  CHECK(std::fabs(bf16_loss - f32_loss) <= 0.05 * f32_loss + 0.01);
}

}  // namespace dtrain::integration
