// The memory estimate (strategy/planning/memory_estimate.h) to the byte on small models
// worked out by hand: parameters, gradients and Adam's two slots of an MLP, its
// activations and backward buffers as the estimate's model counts them (input
// batch, layer outputs, input gradients above the first Dense, the gradient
// before a fused relu, the loss's gradient); optimizer shards, accumulation,
// local replicas, the central copy, bfloat16, a layer range with its auto names;
// runtime.memory_limit's byte sizes; the job-to-query mapping (trainer/setup/job_setup.h)
// and the over-limit message.
#include <catch2/catch.hpp>
#include <string>

#include "config/job_file.h"
#include "core/error.h"
#include "job/job_config.h"
#include "strategy/planning/memory_estimate.h"
#include "plan/plan_memory.h"
#include "trainer/setup/job_setup.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

// input 784 -> Dense(128, relu) -> Dense(10), adam, batch 32, plus `extra` top-level keys.
job::JobConfig mlp_job(const std::string& extra = "", const std::string& train_extra = "") {
  return job::parse_job_config(R"({
    "model": {"input_shape": [784], "layers": [{"type": "Dense", "units": 128, "activation": "relu"},
                                               {"type": "Dense", "units": 10}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": "adam",
    "data": {"train": {"format": "synthetic", "shape": [784], "classes": 10, "count": 64}},
    "train": {"batch_size_per_replica": 32)" + train_extra + R"(})" + extra + "}",
                               "job.json");
}

strategy::MemoryQuery mlp_query() { return plan::memory_query(mlp_job(), 1); }

constexpr int64_t kParams = 784 * 128 + 128 + 128 * 10 + 10;  // 101770
constexpr int64_t kParamBytes = kParams * 4;
// The input batch, Dense(128)'s output and Dense(10)'s, float32, 32 rows.
constexpr int64_t kActivations = 32 * 784 * 4 + 32 * 128 * 4 + 32 * 10 * 4;
// dense: the gradient before its relu (no input gradient: it is the first layer with
// params); dense_1: its input gradient; the loss's gradient of the output.
constexpr int64_t kBackward = 32 * 128 * 4 + 32 * 128 * 4 + 32 * 10 * 4;

}  // namespace

TEST_CASE("an MLP with adam: parameters, gradients, two slots and activations to the byte", "[memory]") {
  const strategy::MemoryEstimate e = strategy::estimate_memory(mlp_query());
  CHECK(e.param_count == kParams);
  CHECK(e.parameters == kParamBytes);
  CHECK(e.gradients == kParamBytes);
  CHECK(e.slots_per_param == 2);
  CHECK(e.optimizer_slots == 2 * kParamBytes);
  CHECK(e.accumulation == 0);
  CHECK(e.weight_copies == 0);
  CHECK(e.activations == kActivations);
  CHECK(e.backward_buffers == kBackward);
  CHECK(e.total == 4 * kParamBytes + kActivations + kBackward);
  REQUIRE(e.layers.size() == 2);
  CHECK(e.layers[0].name == "dense");
  CHECK(e.layers[0].type == "Dense");
  CHECK(e.layers[0].param_bytes == (784 * 128 + 128) * 4);
  CHECK(e.layers[0].activation_bytes == 32 * 128 * 4);
  CHECK(e.layers[1].name == "dense_1");
  CHECK(e.layers[1].param_bytes == (128 * 10 + 10) * 4);
  CHECK(e.biggest(1).at(0).name == "dense");
}

TEST_CASE("the optimizer's slots per parameter come from the optimizer", "[memory]") {
  strategy::MemoryQuery q = mlp_query();
  q.optimizer = job::parse_job_config(R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 2}]},
      "loss": "mse", "optimizer": {"type": "sgd", "momentum": 0.9},
      "data": {"train": {"format": "synthetic", "shape": [4], "count": 8}}, "train": {}})",
                                      "job.json")
                    .optimizer;
  const strategy::MemoryEstimate e = strategy::estimate_memory(q);
  CHECK(e.slots_per_param == 1);
  CHECK(e.optimizer_slots == kParamBytes);
}

TEST_CASE("sharded optimizer state: each task holds a padded 1/N slice of the slots", "[memory]") {
  strategy::MemoryQuery q = mlp_query();
  q.optimizer_shards = 4;
  const strategy::MemoryEstimate e = strategy::estimate_memory(q);
  // ceil(101770 / 4) = 25443, padded to 64 floats: 25472.
  CHECK(strategy::shard_elements(kParams, 4) == 25472);
  CHECK(strategy::shard_elements(kParams, 1) == kParams);
  CHECK(e.optimizer_slots == 2 * 25472 * 4);
  CHECK(e.parameters == kParamBytes);  // parameters and gradients stay whole
  CHECK(e.gradients == kParamBytes);
  // From the job: strategy.shard_optimizer_state splits over the training tasks.
  const job::JobConfig sharded = mlp_job(R"(, "strategy": {"type": "multi_worker_mirrored", "shard_optimizer_state": true})");
  CHECK(plan::memory_query(sharded, 4).optimizer_shards == 4);
  CHECK(plan::memory_query(mlp_job(R"(, "strategy": {"type": "multi_worker_mirrored"})"), 4).optimizer_shards == 1);
}

TEST_CASE("gradient accumulation adds one buffer per trainable parameter", "[memory]") {
  const job::JobConfig job = mlp_job("", R"(, "gradient_accumulation_steps": 4)");
  const strategy::MemoryQuery q = plan::memory_query(job, 1);
  CHECK(q.gradient_accumulation_steps == 4);
  const strategy::MemoryEstimate e = strategy::estimate_memory(q);
  CHECK(e.accumulation == kParamBytes);
  CHECK(e.total == 5 * kParamBytes + kActivations + kBackward);
}

TEST_CASE("mixed_bfloat16 halves the layers' activations and adds the kernels' copies", "[memory]") {
  const job::JobConfig job = mlp_job("", R"(, "precision": "mixed_bfloat16")");
  const strategy::MemoryEstimate e = strategy::estimate_memory(plan::memory_query(job, 1));
  const strategy::MemoryEstimate f32 = strategy::estimate_memory(mlp_query());
  REQUIRE(e.layers.size() == 2);
  for (size_t i = 0; i < 2; ++i) CHECK(e.layers[i].activation_bytes * 2 == f32.layers[i].activation_bytes);
  CHECK(e.parameters == kParamBytes);  // variables stay float32
  CHECK(e.weight_copies == (784 * 128 + 128 * 10) * 2);
  // The float32 input batch, its bfloat16 copy for the first Dense, the two outputs
  // in bfloat16, and the output converted to float32 for the loss.
  CHECK(e.activations == 32 * 784 * 4 + 32 * 784 * 2 + 32 * 128 * 2 + 32 * 10 * 2 + 32 * 10 * 4);
  // dpre and dx in bfloat16, the loss's gradient converted into bfloat16, and the loss's own.
  CHECK(e.backward_buffers == 32 * 128 * 2 + 32 * 128 * 2 + 32 * 10 * 2 + 32 * 10 * 4);
}

namespace {

// A tiny GPT over `t` byte tokens: TokenAndPositionEmbedding (256, t, 16), two
// pre-norm TransformerDecoder blocks (intermediate 32, 2 heads of 8, gelu),
// LayerNormalization, Dense(256); adam, batch 16.
job::JobConfig gpt_job(int64_t t) {
  const std::string block =
      R"({"type": "TransformerDecoder", "intermediate_dim": 32, "num_heads": 2, "activation": "gelu",
          "normalize_first": true})";
  return job::parse_job_config(R"({
    "model": {"input_shape": [)" + std::to_string(t) + R"(], "layers": [
      {"type": "TokenAndPositionEmbedding", "vocabulary_size": 256, "sequence_length": )" + std::to_string(t) +
                                   R"(, "embedding_dim": 16},
      )" + block + ", " + block + R"(,
      {"type": "LayerNormalization", "epsilon": 1e-5}, {"type": "Dense", "units": 256}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": "adam",
    "data": {"train": {"format": "synthetic", "shape": [)" + std::to_string(t) + R"(], "classes": 256, "count": 64}},
    "train": {"batch_size_per_replica": 16}})",
                               "job.json");
}

}  // namespace

TEST_CASE("a tiny GPT: attention's q, k, v, output and log-sum-exp counted, no (T, T) scores", "[memory]") {
  const strategy::MemoryEstimate e = strategy::estimate_memory(plan::memory_query(gpt_job(16), 1));
  // Bytes of one float per position of the batch: 16 samples x 16 tokens.
  constexpr int64_t row = 16 * 16 * 4;
  constexpr int64_t d = 16, heads = 2, key_dim = 8, ff = 32, vocab = 256;
  // Layer norm: y, each position's mean and 1/std; dx.
  constexpr int64_t norm_fwd = row * d + 2 * row, norm_bwd = row * d;
  // Attention: q, k, v and its output (N, T, heads, 8), the log-sum-exp (N, heads, T), y;
  // backward their gradients, dx and the part of dx from each projection.
  constexpr int64_t attention_fwd = row * heads * 3 * key_dim + row * heads * key_dim + row * heads + row * d;
  constexpr int64_t attention_bwd = row * heads * 3 * key_dim + row * heads * key_dim + 2 * row * d;
  // Feed-forward: the gelu Dense keeps its output and the value before gelu; its dx and dpre.
  constexpr int64_t ff_fwd = 2 * row * ff + row * d, ff_bwd = row * d + row * ff + row * ff;
  // Each residual block keeps its sum and makes dx.
  constexpr int64_t block_fwd = norm_fwd + attention_fwd + row * d + norm_fwd + ff_fwd + row * d;
  constexpr int64_t block_bwd = norm_bwd + attention_bwd + row * d + norm_bwd + ff_bwd + row * d;
  REQUIRE(e.layers.size() == 5);
  CHECK(e.layers[1].name == "transformer_decoder");
  CHECK(e.layers[1].activation_bytes == block_fwd);
  CHECK(e.layers[1].backward_bytes == block_bwd);
  CHECK(e.layers[1].activation_bytes + e.layers[1].backward_bytes == 470 * 1024);  // validate's "470.0 KiB"
  // The input ids; the embedding's output, its token part and its position ids; the
  // blocks; the last norm; the logits. Backward: no gradient below the embedding.
  CHECK(e.activations == row + (2 * row * d + row) + 2 * block_fwd + norm_fwd + row * vocab);
  CHECK(e.backward_buffers == 2 * block_bwd + norm_bwd + row * d + row * vocab);
  // Every buffer grows with the sequence, none with its square.
  const strategy::MemoryEstimate longer = strategy::estimate_memory(plan::memory_query(gpt_job(32), 1));
  CHECK(longer.activations == 2 * e.activations);
  CHECK(longer.backward_buffers == 2 * e.backward_buffers);
}

TEST_CASE("local replicas each hold everything, central_storage adds a central copy", "[memory]") {
  const job::JobConfig mirrored = mlp_job(R"(, "strategy": {"type": "mirrored", "replicas": 2})");
  const strategy::MemoryEstimate m = strategy::estimate_memory(plan::memory_query(mirrored, 1));
  CHECK(m.local_replicas == 2);
  CHECK(m.total == 2 * (4 * kParamBytes + kActivations + kBackward));
  const job::JobConfig central = mlp_job(R"(, "strategy": {"type": "central_storage", "replicas": 2})");
  const strategy::MemoryEstimate c = strategy::estimate_memory(plan::memory_query(central, 1));
  CHECK(c.central_copy);
  CHECK(c.total == m.total + 4 * kParamBytes);
  const job::JobConfig one = mlp_job(R"(, "strategy": {"type": "one_device"})");
  CHECK(plan::memory_query(one, 1).local_replicas == 1);
}

TEST_CASE("a layer range: the stage's own layers, names as in the whole model, the input gradient", "[memory]") {
  strategy::MemoryQuery q = plan::pipeline_stage_memory_query(mlp_job(), 1, 2, 32, 1);
  CHECK(q.needs_input_gradient);
  const strategy::MemoryEstimate e = strategy::estimate_memory(q);
  REQUIRE(e.layers.size() == 1);
  CHECK(e.layers[0].name == "dense_1");
  CHECK(e.parameters == (128 * 10 + 10) * 4);
  CHECK(e.activations == 32 * 128 * 4 + 32 * 10 * 4);       // its input (received) and output
  CHECK(e.backward_buffers == 32 * 128 * 4 + 32 * 10 * 4);  // its input gradient and the output's
  // Micro-batches in flight multiply the activations, not the backward buffers.
  q.batches_in_flight = 3;
  const strategy::MemoryEstimate three = strategy::estimate_memory(q);
  CHECK(three.activations == 3 * e.activations);
  CHECK(three.backward_buffers == e.backward_buffers);
}

TEST_CASE("Flatten is a view, Dropout keeps its output and a float32 mask", "[memory]") {
  const job::JobConfig job = job::parse_job_config(R"({
    "model": {"input_shape": [4, 4, 1], "layers": [{"type": "Flatten"}, {"type": "Dropout", "rate": 0.5},
                                                  {"type": "Dense", "units": 3}]},
    "loss": "mse", "optimizer": "sgd",
    "data": {"train": {"format": "synthetic", "shape": [4, 4, 1], "count": 8}},
    "train": {"batch_size_per_replica": 2}})",
                                                   "job.json");
  const strategy::MemoryEstimate e = strategy::estimate_memory(plan::memory_query(job, 1));
  CHECK(e.optimizer_slots == 0);  // plain sgd
  CHECK(e.activations == 2 * 16 * 4 + (2 * 16 * 4 + 2 * 16 * 4) + 2 * 3 * 4);
  CHECK(e.backward_buffers == 2 * 3 * 4);  // nothing below the first Dense needs a gradient
  REQUIRE(e.layers.size() == 3);
  CHECK(e.layers[0].activation_bytes == 0);
}

TEST_CASE("over runtime.memory_limit: the message names the figures, the biggest layer and the fixes", "[memory]") {
  strategy::MemoryQuery q = mlp_query();
  CHECK(strategy::memory_limit_problem(strategy::estimate_memory(q)).empty());  // no limit
  q.limit_bytes = 1 << 20;
  const strategy::MemoryEstimate e = strategy::estimate_memory(q);
  const std::string problem = strategy::memory_limit_problem(e);
  CHECK_THAT(problem, Contains("this task needs an estimated 1.7 MiB"));
  CHECK_THAT(problem, Contains("parameters 397.5 KiB, gradients 397.5 KiB, optimizer slots 795.1 KiB"));
  CHECK_THAT(problem, Contains("biggest: dense (Dense) 392.5 KiB of parameters"));
  CHECK_THAT(problem, Contains("but the limit is 1.0 MiB"));
  CHECK_THAT(problem, Contains("strategy.type \"pipeline\""));
  CHECK_THAT(problem, Contains("strategy.shard (\"optimizer_state\", \"gradients\" or \"parameters\""));
  q.limit_bytes = e.total;  // exactly at the limit fits
  CHECK(strategy::memory_limit_problem(strategy::estimate_memory(q)).empty());

  const std::string text = strategy::describe(e);
  CHECK_THAT(text, Contains("Memory per task (estimate): 1.7 MiB (limit 1.0 MiB)"));
  CHECK_THAT(text, Contains("for 101770 parameters, adam with 2 slot(s) per parameter, batches of 32 rows"));
  CHECK_THAT(text, Contains("biggest layers: dense (Dense)"));

  const job::JobConfig limited = mlp_job(R"(, "runtime": {"memory_limit": "1MiB"})");
  CHECK_THROWS_WITH(trainer::check_memory(limited, plan::task_memory(limited, 1, 0, nullptr)),
                    Contains("job.json: runtime.memory_limit: this task needs an estimated"));
  const job::JobConfig two_mib = mlp_job(R"(, "runtime": {"memory_limit": "2MiB"})");
  CHECK_NOTHROW(trainer::check_memory(two_mib, plan::task_memory(two_mib, 1, 0, nullptr)));
}

TEST_CASE("runtime.memory_limit: bytes, or a number with an IEC or SI unit", "[memory][config]") {
  CHECK(config::parse_byte_size("2GiB") == int64_t{2} << 30);
  CHECK(config::parse_byte_size("512MiB") == int64_t{512} << 20);
  CHECK(config::parse_byte_size("1.5GB") == 1500000000);
  CHECK(config::parse_byte_size("1.5GiB") == int64_t{3} << 29);
  CHECK(config::parse_byte_size("300000KB") == 300000000);
  CHECK(config::parse_byte_size("300000kB") == 300000000);
  CHECK(config::parse_byte_size("64 B") == 64);
  CHECK(config::parse_byte_size("4096") == 4096);
  CHECK(config::parse_byte_size("1TiB") == int64_t{1} << 40);
  CHECK(config::parse_byte_size("2 gib") == int64_t{2} << 30);
  for (const char* bad : {"", "GiB", "2 GiBs", "-1GiB", "1.5", "2XB", "1.2.3MB", "2G", "1e9", "99999999999TB"}) {
    INFO(bad);
    CHECK_FALSE(config::parse_byte_size(bad).has_value());
  }

  const auto limit = [](const std::string& value) {
    return mlp_job(R"(, "runtime": {"memory_limit": )" + value + "}").runtime.memory_limit;
  };
  CHECK(limit(R"("2GiB")") == int64_t{2} << 30);
  CHECK(limit("1000000") == 1000000);
  CHECK(limit("0") == 0);
  CHECK(mlp_job().runtime.memory_limit == 0);
  for (const char* bad : {R"("lots")", "-5", "1.5", "true", R"("2 GiBs")"}) {
    INFO(bad);
    CHECK_THROWS_WITH(limit(bad), Contains("runtime.memory_limit") && Contains("\"512MiB\", \"2GiB\", \"1.5GB\""));
  }
  // Each machine has its own memory: the tasks of a job may differ in it.
  CHECK(mlp_job(R"(, "runtime": {"memory_limit": "1GiB"})").agreement_json == mlp_job().agreement_json);
}
