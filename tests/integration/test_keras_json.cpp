// model.keras_json end to end: the Fashion-MNIST CNN that tf-keras'
// model.to_json() wrote (tests/fixtures/keras/cnn_tf_keras.json) trains to the
// same params_sha256 as the shipped dtrain job file with the same seed, and the
// Functional GPT that Keras 3 wrote (Add residuals) trains to the same
// parameters as dtrain's own Residual blocks; an unsupported layer is exit 2
// naming it and its place in the file.
#include <catch2/catch.hpp>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

const std::string kKeras = std::string(DTRAIN_SOURCE_DIR) + "/tests/fixtures/keras/";

// The run summaries of the dtrain job and the Keras one, each trained on one thread.
std::vector<json> run_both(const TempDir& dir, const json& dtrain_job, const json& keras_job) {
  std::vector<json> summaries;
  for (const json* job : {&dtrain_job, &keras_job}) {
    const std::string name = std::to_string(summaries.size());
    const std::string summary = dir.file("summary" + name + ".json");
    json own = *job;  // (each run its own output.dir: a second run into one is refused)
    if (own.contains("output")) own["output"]["dir"] = dir.file("out" + name);
    const RunOutput run = run_dtrain(
        {"run", "--config", write_job(dir, own, "job" + name + ".json"), "--threads", "1", "--summary", summary},
        {120.0, ""});
    INFO(describe(run));
    REQUIRE(run.exit_code == 0);
    summaries.push_back(read_json_file(summary));
  }
  return summaries;
}

}  // namespace

TEST_CASE("the CNN from tf-keras' to_json trains to the dtrain job file's parameters") {
  TempDir dir;
  const json dtrain_job = small_cnn_job(256, 64);
  json keras_job = dtrain_job;
  keras_job["model"] = {{"keras_json", kKeras + "cnn_tf_keras.json"}};
  const std::vector<json> summaries = run_both(dir, dtrain_job, keras_job);
  CHECK(summaries[1]["params_sha256"] == summaries[0]["params_sha256"]);
  CHECK(summaries[1]["test_accuracy"] == summaries[0]["test_accuracy"]);
}

TEST_CASE("the Functional GPT from Keras 3's to_json trains to the dtrain model's parameters") {
  TempDir dir;
  json dtrain_job = tiny_gpt_job(dir, 6);
  for (const char* split : {"train", "test"}) dtrain_job["data"][split]["sequence_length"] = 32;
  dtrain_job["model"] = read_json_file(kKeras + "gpt_functional_dtrain.json");
  json keras_job = dtrain_job;
  keras_job["model"] = {{"keras_json", kKeras + "gpt_functional_keras3.json"}};
  const std::vector<json> summaries = run_both(dir, dtrain_job, keras_job);
  CHECK(summaries[1]["params_sha256"] == summaries[0]["params_sha256"]);
  CHECK(summaries[1]["test_loss"] == summaries[0]["test_loss"]);
  // Six steps of Adam move the loss off ln(256) = 5.55, the untrained value.
  CHECK(summaries[1]["test_loss"].get<double>() < 5.0);
}

TEST_CASE("a Keras model with a layer dtrain lacks is exit 2 naming it") {
  TempDir dir;
  json job = small_cnn_job(256, 64);
  job["model"] = {{"keras_json", kKeras + "unsupported_keras3.json"}};
  const RunOutput run = run_dtrain({"validate", "--config", write_job(dir, job)});
  check_error(run, 2, {"unsupported_keras3.json", "config.layers[2] (Conv2DTranspose", "not supported"});
}
