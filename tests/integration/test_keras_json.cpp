// model.keras_json end to end: the Fashion-MNIST CNN that tf-keras'
// model.to_json() wrote (tests/fixtures/keras/cnn_tf_keras.json) trains to the
// same params_sha256 as the shipped dtrain job file with the same seed; an
// unsupported layer is exit 2 naming it and its place in the file.
#include <catch2/catch.hpp>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

const std::string kKeras = std::string(DTRAIN_SOURCE_DIR) + "/tests/fixtures/keras/";

}  // namespace

TEST_CASE("the CNN from tf-keras' to_json trains to the dtrain job file's parameters") {
  TempDir dir;
  const json dtrain_job = small_cnn_job(256, 64);
  json keras_job = dtrain_job;
  keras_job["model"] = {{"keras_json", kKeras + "cnn_tf_keras.json"}};
  json summaries[2];
  const json* jobs[2] = {&dtrain_job, &keras_job};
  for (int i = 0; i < 2; ++i) {
    const std::string summary = dir.file("summary" + std::to_string(i) + ".json");
    const RunOutput run = run_dtrain(
        {"run", "--config", write_job(dir, *jobs[i], "job" + std::to_string(i) + ".json"), "--threads", "1",
         "--summary", summary},
        {120.0, ""});
    INFO(describe(run));
    REQUIRE(run.exit_code == 0);
    summaries[i] = read_json_file(summary);
  }
  CHECK(summaries[1]["params_sha256"] == summaries[0]["params_sha256"]);
  CHECK(summaries[1]["test_accuracy"] == summaries[0]["test_accuracy"]);
}

TEST_CASE("a Keras model with a layer dtrain lacks is exit 2 naming it") {
  TempDir dir;
  json job = small_cnn_job(256, 64);
  job["model"] = {{"keras_json", kKeras + "unsupported_keras3.json"}};
  const RunOutput run = run_dtrain({"validate", "--config", write_job(dir, job)});
  check_error(run, 2, {"unsupported_keras3.json", "config.layers[2] (Conv2DTranspose", "not supported"});
}
