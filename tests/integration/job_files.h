// Files for integration tests: job configs written into a test's temporary
// directory (TempDir, support/temp_dir.h), the shipped configs and the
// Fashion-MNIST files as starting points, and readers for the JSON that dtrain
// writes (--summary files, metrics.jsonl). Every reader FAILs the test with the
// file's name when the file is missing or is not the JSON it should be.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace dtrain::integration {

// The temporary directory of each test (support/temp_dir.h).
using test::TempDir;

// Writes `job` as indented JSON to dir/name and returns that path.
std::string write_job(const TempDir& dir, const nlohmann::json& job, const std::string& name = "job.json");

// The path of one of the shipped configs, e.g. "fashion_mnist_mlp.json".
std::string shipped_config_path(const std::string& file_name);
// The parsed shipped config.
nlohmann::json shipped_config(const std::string& file_name);
// The path of a Fashion-MNIST file, e.g. "t10k-labels-idx1-ubyte.gz".
std::string fashion_mnist_file(const std::string& file_name);

// The shipped MLP config cut down for a fast test: the first `train_take` and
// `test_take` samples, 1 epoch, no output directory and no checkpoints.
nlohmann::json small_mlp_job(int64_t train_take = 2000, int64_t test_take = 500);
// small_mlp_job(4096, 256) for step-by-step comparisons: `batch_size_per_replica`,
// 10 steps an epoch, `epochs`, a loss record every step, output in dir/out and a
// checkpoint every epoch in dir/ckpt. The strategy is the caller's to set.
nlohmann::json stepwise_mlp_job(const TempDir& dir, int64_t batch_size_per_replica, int epochs);
// The same for the shipped CNN config.
nlohmann::json small_cnn_job(int64_t train_take = 640, int64_t test_take = 200);

// A byte-level language model on a text source (a corpus of 7000 bytes of English
// written to dir/corpus.txt): windows of 16 tokens at a stride of 8, the last 20%
// held out as data.test; two 1x1 Conv2D layers over the positions make a
// (16, 1, 256) output per sample (the next token's logits at each position, from
// its own token: a bigram model); Adam, batch 16, output in dir/out.
nlohmann::json language_model_job(const TempDir& dir, int64_t epochs = 2);

// A tiny GPT on the same corpus: TokenAndPositionEmbedding (vocabulary 256,
// sequence 16, width 16), two pre-norm TransformerDecoder blocks (intermediate
// 32, 2 heads, gelu), LayerNormalization and Dense(256): (16, 256) logits per
// sample. Adam, batch 16, one epoch of `steps` steps, a loss record every step,
// output in dir/out.
nlohmann::json tiny_gpt_job(const TempDir& dir, int64_t steps = 12);

// A multi_worker_mirrored MLP job on 4096 samples for checkpoint tests: 3 epochs
// of 32 steps at a global batch of 128 (128 / workers per replica), a checkpoint
// every 10 steps into dir/ckpt, output in dir/out.
nlohmann::json resumable_job(const TempDir& dir, int workers);

// Runs `job` (written into `dir`) as `workers` local tasks, one thread each, with
// `dtrain launch --summary`; REQUIREs exit 0 and every task's summary, CHECKs that
// they all report the same params_sha256, and returns the launch summary.
nlohmann::json launch_job(const TempDir& dir, const nlohmann::json& job, int workers);
// The params_sha256 every task of a launch summary reports: REQUIREs each task's
// summary and CHECKs that they all agree.
std::string common_params_hash(const nlohmann::json& launch_summary);

// The chief's (or the single task's) step losses from dir/out/metrics.jsonl, in
// order (a resumed run's after the earlier ones); REQUIREs `expected` of them
// unless it is negative.
std::vector<double> step_losses(const TempDir& dir, int64_t expected = -1);
// REQUIREs equal lengths and each |got - want| <= tolerance x |want|, naming the step.
void require_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                   const std::string& what);

// The whole file as bytes.
std::string read_file(const std::string& path);
// One JSON value from a file.
nlohmann::json read_json_file(const std::string& path);
// One JSON value per non-empty line (metrics.jsonl).
std::vector<nlohmann::json> read_json_lines(const std::string& path);

// An IDX file's bytes: a big-endian header (magic 0x0000080N, then each size) and
// `payload_bytes` bytes of `fill` (the payload may be shorter than the header says).
std::string idx_bytes(const std::vector<uint32_t>& sizes, size_t payload_bytes, uint8_t fill = 0);

}  // namespace dtrain::integration
