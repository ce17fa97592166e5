// Tests of --set overrides: values of each kind, array indices, added keys, the type
// rule, syntax errors, blame in schema errors, and normalized_json after overrides.
#include <catch2/catch.hpp>

#include "job/job_config.h"
#include "config_test_util.h"
#include "nn/layers.h"
#include "optim/schedule.h"

namespace dtrain::config::test {
namespace {

// minimal_job() with three layers, an object optimizer and a test source.
json job_for_overrides() {
  json job = minimal_job();
  job["model"]["layers"] = json::parse(R"([{"type": "Flatten"}, {"type": "Dense", "units": 8},
                                            {"type": "Dense", "units": 2}])");
  job["optimizer"] = {{"type", "adam"}, {"learning_rate", 0.001}};
  job["data"]["test"] = job["data"]["train"];
  job["output"] = {{"dir", "runs/a"}};
  job["train"] = {{"epochs", 2}};
  job["data"]["cache"] = true;
  return job;
}

TEST_CASE("set override: replaces integers and floats and strings", "[config][overrides]") {
  const JobConfig c =
      parse(job_for_overrides(), {"train.epochs=7", "optimizer.learning_rate=0.01",
                                  "output.dir=runs/x", "data.test.take=500", "data.cache=false"});
  CHECK(c.train.epochs == 7);
  CHECK(c.optimizer.learning_rate.initial_learning_rate == Approx(0.01));
  CHECK(c.output.dir == "runs/x");
  CHECK(c.data.test.take == 500);
  CHECK_FALSE(c.data.cache);
}

TEST_CASE("set override: reaches array elements by index", "[config][overrides]") {
  const JobConfig c =
      parse(job_for_overrides(), {"model.layers[1].units=128", "model.input_shape[0]=16"});
  CHECK(c.model.layers[1].options_as<nn::DenseOptions>().units == 128);
  CHECK(c.model.input_shape[0] == 16);
}

TEST_CASE("set override: of a number-like value where a string is held keeps the text",
          "[config][overrides]") {
  CHECK(parse(job_for_overrides(), {"output.dir=2024"}).output.dir == "2024");
  CHECK(parse(job_for_overrides(), {"output.dir=\"quoted\""}).output.dir == "quoted");
}

TEST_CASE("set override: may turn a learning rate into a schedule", "[config][overrides]") {
  const JobConfig c =
      parse(job_for_overrides(), {R"(optimizer.learning_rate={"type": "cosine", )"
                                  R"("initial_learning_rate": 0.1, "decay_steps": 100})"});
  CHECK(c.optimizer.learning_rate.type->name == "cosine");
  CHECK(c.optimizer.learning_rate.decay_steps == 100);
}

TEST_CASE("set override: adds missing keys and sections", "[config][overrides]") {
  const JobConfig c = parse(job_for_overrides(), {"runtime.threads=4", "train.steps_per_epoch=3",
                                                  "model.layers[1].activation=relu"});
  CHECK(c.runtime.threads == 4);
  CHECK(c.train.steps_per_epoch == 3);
  CHECK(c.model.layers[1].options_as<nn::DenseOptions>().activation == kernels::Activation::kRelu);
}

TEST_CASE("set override: the later of two wins", "[config][overrides]") {
  CHECK(parse(job_for_overrides(), {"train.epochs=2", "train.epochs=3"}).train.epochs == 3);
}

TEST_CASE("set override: with a value of another kind is rejected", "[config][overrides]") {
  CHECK_THAT(
      config_error(job_for_overrides(), {"train.epochs=abc"}),
      Contains("--set train.epochs=abc: train.epochs holds a number, got \"abc\" (a string)"));
  CHECK_THAT(config_error(job_for_overrides(), {"model.layers[1].units=true"}),
             Contains("--set model.layers[1].units=true: model.layers[1].units holds a number, "
                      "got true (a boolean)"));
  CHECK_THAT(config_error(job_for_overrides(), {"data.cache=1"}),
             Contains("--set data.cache=1: data.cache holds a boolean, got 1 (a number)"));
}

TEST_CASE("set override: without '=' or with a bad path is a syntax error", "[config][overrides]") {
  const json job = job_for_overrides();
  CHECK_THAT(config_error(job, {"train.epochs"}),
             Contains("--set train.epochs: expected key.path=value") && Contains("no '='"));
  CHECK_THAT(config_error(job, {"=5"}), Contains("--set =5: the key path before '=' is empty"));
  CHECK_THAT(config_error(job, {"train..epochs=5"}),
             Contains("--set train..epochs=5: empty key name in 'train..epochs'"));
  CHECK_THAT(config_error(job, {"model.layers[x].units=5"}),
             Contains("--set model.layers[x].units=5: bad index [x]"));
  CHECK_THAT(config_error(job, {"model.layers[-1].units=5"}), Contains("bad index [-1]"));
  CHECK_THAT(config_error(job, {"model.layers[1.units=5"}), Contains("missing ']'"));
  CHECK_THAT(config_error(job, {"train.=5"}), Contains("'train.' ends with '.'"));
}

TEST_CASE("set override: with an index out of range says the array's size", "[config][overrides]") {
  CHECK_THAT(config_error(job_for_overrides(), {"model.layers[3].units=5"}),
             Contains("--set model.layers[3].units=5: index 3 is out of range: model.layers has "
                      "3 elements (0 to 2)"));
}

TEST_CASE("set override: through a non-container is rejected", "[config][overrides]") {
  CHECK_THAT(config_error(job_for_overrides(), {"train.epochs.x=1"}),
             Contains("--set train.epochs.x=1: train.epochs is a number, not an object"));
  CHECK_THAT(config_error(job_for_overrides(), {"train[0]=1"}),
             Contains("--set train[0]=1: train is an object, not an array"));
}

TEST_CASE("set override: a misspelt key gets a suggestion and names the override",
          "[config][overrides]") {
  const std::string e = config_error(job_for_overrides(), {"train.epoch=3"});
  CHECK_THAT(e, Contains("job.json: train: unknown key 'epoch' for the train section; "
                         "did you mean 'epochs'?"));
  CHECK_THAT(e, Contains("(from --set train.epoch=3)"));
  CHECK_THAT(config_error(job_for_overrides(), {"trian.epochs=3"}),
             Contains("unknown top-level key 'trian'; did you mean 'train'?") &&
                 Contains("(from --set trian.epochs=3)"));
}

TEST_CASE("a schema error in an overridden value names the override", "[config][overrides]") {
  CHECK_THAT(config_error(job_for_overrides(), {"train.epochs=0"}),
             Contains("job.json: train.epochs: must be a positive integer, got 0 "
                      "(from --set train.epochs=0)"));
}

TEST_CASE("normalized_json reflects the overrides", "[config][overrides]") {
  const json job = job_for_overrides();
  const JobConfig plain = parse(job);
  const JobConfig changed = parse(job, {"train.epochs=9"});
  CHECK(plain.normalized_json != changed.normalized_json);
  CHECK(changed.normalized_json.find("\"epochs\":9") != std::string::npos);
  json edited = job;
  edited["train"]["epochs"] = 9;
  CHECK(parse(edited).normalized_json == changed.normalized_json);
}

}  // namespace
}  // namespace dtrain::config::test
