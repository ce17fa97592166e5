// Implementation of job_files.h with nlohmann/json. Failures to read a test's own
// files FAIL the test at once: they are problems of the test machine, not of
// dtrain, and the message says which file.
#include "integration/job_files.h"
#include "integration/run_dtrain.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#ifndef DTRAIN_SOURCE_DIR
#error "DTRAIN_SOURCE_DIR (the repository root) must be defined by the build"
#endif

namespace dtrain::integration {
namespace {

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

nlohmann::json shrink(nlohmann::json job, int64_t train_take, int64_t test_take) {
  job["data"]["train"]["take"] = train_take;
  job["data"]["test"]["take"] = test_take;
  job["train"]["epochs"] = 1;
  job.erase("output");
  job.erase("checkpoint");  // (the shipped configs save into their output.dir)
  return job;
}

// The generated corpus (7000 bytes of English in dir/corpus.txt) as data.train
// and data.test: windows of 16 tokens at a stride of 8, the last 20% held out.
nlohmann::json text_corpus_data(const TempDir& dir) {
  std::string text;
  const char* lines[] = {"The quick brown fox jumps over the lazy dog. ", "A stitch in time saves nine. ",
                         "All that glitters is not gold; all who wander are not lost. ",
                         "To be, or not to be, that is the question.\n"};
  for (int i = 0; text.size() < 7000; ++i) text += lines[(i * 7 + i / 4) % 4];
  const std::string corpus = dir.write("corpus.txt", text.substr(0, 7000));
  auto source = [&](const std::string& subset) {
    return nlohmann::json{{"format", "text"},      {"files", {corpus}},         {"sequence_length", 16},
                          {"stride", 8},           {"validation_split", 0.2},  {"subset", subset}};
  };
  return {{"train", source("training")}, {"test", source("validation")}, {"shuffle_buffer", 1000}};
}

}  // namespace

std::string write_job(const TempDir& dir, const nlohmann::json& job, const std::string& name) {
  return dir.write(name, job.dump(2) + "\n");
}

std::string shipped_config_path(const std::string& file_name) {
  // DTRAIN_TEST_SOURCE_DIR: the repository when the tests run away from their build tree.
  const char* root = std::getenv("DTRAIN_TEST_SOURCE_DIR");
  return std::string(root && *root ? root : DTRAIN_SOURCE_DIR) + "/configs/" + file_name;
}

nlohmann::json shipped_config(const std::string& file_name) {
  return read_json_file(shipped_config_path(file_name));
}

std::string fashion_mnist_file(const std::string& file_name) {
  return std::string(kFashionMnistDir) + "/" + file_name;
}

nlohmann::json small_mlp_job(int64_t train_take, int64_t test_take) {
  return shrink(shipped_config("fashion_mnist_mlp.json"), train_take, test_take);
}

nlohmann::json stepwise_mlp_job(const TempDir& dir, int64_t batch_size_per_replica, int epochs) {
  nlohmann::json job = small_mlp_job(4096, 256);
  job["train"]["batch_size_per_replica"] = batch_size_per_replica;
  job["train"]["steps_per_epoch"] = 10;
  job["train"]["epochs"] = epochs;
  job["train"]["log_every_steps"] = 1;
  job["output"] = {{"dir", dir.file("out")}};
  job["checkpoint"] = {{"dir", dir.file("ckpt")}, {"every_epochs", 1}};
  return job;
}

nlohmann::json small_cnn_job(int64_t train_take, int64_t test_take) {
  return shrink(shipped_config("fashion_mnist_cnn.json"), train_take, test_take);
}

nlohmann::json language_model_job(const TempDir& dir, int64_t epochs) {
  const nlohmann::json data = text_corpus_data(dir);
  return {{"model",
           {{"input_shape", {16, 1, 1}},
            {"layers",
             {{{"type", "Conv2D"}, {"filters", 32}, {"kernel_size", 1}, {"activation", "relu"}},
              {{"type", "Conv2D"}, {"filters", 256}, {"kernel_size", 1}}}}}},
          {"loss", {{"type", "sparse_categorical_crossentropy"}, {"from_logits", true}}},
          {"optimizer", {{"type", "adam"}, {"learning_rate", 0.01}}},
          {"data", data},
          {"train", {{"epochs", epochs}, {"batch_size_per_replica", 16}, {"seed", 1}, {"log_every_steps", 5}}},
          {"output", {{"dir", dir.file("out")}}}};
}

nlohmann::json tiny_gpt_job(const TempDir& dir, int64_t steps) {
  const nlohmann::json block = {{"type", "TransformerDecoder"}, {"intermediate_dim", 32}, {"num_heads", 2},
                                {"activation", "gelu"},         {"normalize_first", true}};
  return {{"model",
           {{"input_shape", {16}},
            {"layers",
             {{{"type", "TokenAndPositionEmbedding"}, {"vocabulary_size", 256}, {"sequence_length", 16},
               {"embedding_dim", 16}},
              block,
              block,
              {{"type", "LayerNormalization"}, {"epsilon", 1e-5}},
              {{"type", "Dense"}, {"units", 256}}}}}},
          {"loss", {{"type", "sparse_categorical_crossentropy"}, {"from_logits", true}}},
          {"optimizer", {{"type", "adam"}, {"learning_rate", 0.01}}},
          {"data", text_corpus_data(dir)},
          {"train",
           {{"epochs", 1}, {"steps_per_epoch", steps}, {"batch_size_per_replica", 16}, {"seed", 1},
            {"log_every_steps", 1}}},
          {"output", {{"dir", dir.file("out")}}}};
}

nlohmann::json launch_job(const TempDir& dir, const nlohmann::json& job, int workers) {
  const std::string summary = dir.file("launch.json");
  const RunOutput r = run_dtrain({"launch", "--workers", std::to_string(workers), "--config", write_job(dir, job),
                                  "--threads", "1", "--summary", summary},
                                 {180.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  nlohmann::json launch = read_json_file(summary);
  common_params_hash(launch);
  return launch;
}

std::string common_params_hash(const nlohmann::json& launch_summary) {
  std::string hash;
  for (const auto& [task, s] : launch_summary["tasks"].items()) {
    INFO(task);
    REQUIRE(s.is_object());
    if (hash.empty()) hash = s["params_sha256"];
    CHECK(s["params_sha256"] == hash);
  }
  return hash;
}

std::vector<double> step_losses(const TempDir& dir, int64_t expected) {
  std::vector<double> losses;
  for (const nlohmann::json& record : read_json_lines(dir.file("out/metrics.jsonl")))
    if (record["kind"] == "step") losses.push_back(record["loss"].get<double>());
  if (expected >= 0) REQUIRE(static_cast<int64_t>(losses.size()) == expected);
  return losses;
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                   const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(what << ", step " << i + 1 << ": " << got[i] << " vs " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= tolerance * std::fabs(want[i]));
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) FAIL("cannot open " << path);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

nlohmann::json read_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FAIL(path << " is not valid JSON: " << e.what() << "\n" << text);
  }
  return {};
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::istringstream lines(read_file(path));
  std::vector<nlohmann::json> records;
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.empty()) continue;
    try {
      records.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      FAIL(path << ":" << number << " is not valid JSON: " << e.what() << "\n" << line);
    }
  }
  return records;
}

std::string idx_bytes(const std::vector<uint32_t>& sizes, size_t payload_bytes, uint8_t fill) {
  std::string bytes;
  auto put_be32 = [&bytes](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>((v >> shift) & 0xff));
  };
  put_be32(0x00000800u | static_cast<uint32_t>(sizes.size()));
  for (uint32_t s : sizes) put_be32(s);
  bytes.append(payload_bytes, static_cast<char>(fill));
  return bytes;
}

nlohmann::json resumable_job(const TempDir& dir, int workers) {
  nlohmann::json job = small_mlp_job(4096, 256);
  job["strategy"] = {{"type", "multi_worker_mirrored"}};
  job["train"]["batch_size_per_replica"] = 128 / workers;
  job["train"]["epochs"] = 3;
  job["output"] = {{"dir", dir.file("out")}};
  job["checkpoint"] = {{"dir", dir.file("ckpt")}, {"every_steps", 10}};
  return job;
}

}  // namespace dtrain::integration
