// Bad job configs and bad command lines, run through the real dtrain binary: each
// must end with "dtrain: error: ..." on stderr and the documented exit code (2 for
// config and usage problems), never with a crash, and the message must name what
// the user has to fix: the file's line:column for malformed JSON, the unknown key
// and its closest valid spelling, the valid choices for a type name, the JSON path
// of a wrong value, the layer and the shapes that do not fit. The jobs start from
// the shipped configs, changed in one place each.
#include <algorithm>
#include <catch2/catch.hpp>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

constexpr int kConfigError = 2;

// `command` (run or validate) on `job` written into `tmp`, with `extra` arguments.
RunOutput run_job(const TempDir& tmp, const nlohmann::json& job, const std::vector<std::string>& extra = {},
                  const std::string& command = "run") {
  std::vector<std::string> args = {command, "--config", write_job(tmp, job)};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_dtrain(args);
}

// A job with `layers` on synthetic samples of `shape` (4 classes, no test set), for
// shape errors that need no real data.
nlohmann::json synthetic_job(const std::vector<int64_t>& shape, const nlohmann::json& layers) {
  nlohmann::json job = small_mlp_job();
  job["model"]["input_shape"] = shape;
  job["model"]["layers"] = layers;
  job["data"]["train"] = {{"format", "synthetic"}, {"shape", shape}, {"classes", 4}, {"count", 64}};
  job["data"].erase("test");
  return job;
}

}  // namespace

TEST_CASE("malformed JSON is exit 2 and names the file's line and column", "[integration]") {
  TempDir tmp;
  SECTION("an invalid character") {
    // Line 5, column 15 is the '@'.
    const std::string text = "{\n  \"model\": {},\n  \"train\": {\n    \"seed\": 1,\n    \"epochs\": @2\n  }\n}\n";
    const RunOutput r = run_dtrain({"run", "--config", tmp.write("broken.json", text)});
    check_error(r, kConfigError, {"broken.json:5:15:", "malformed JSON"});
  }
  SECTION("a missing comma on a later line") {
    std::string text = small_mlp_job().dump(2);
    const size_t comma = text.find(",\n", text.find("\"epochs\""));
    REQUIRE(comma != std::string::npos);
    text.erase(comma, 1);
    const size_t line = static_cast<size_t>(std::count(text.begin(), text.begin() + comma, '\n')) + 1;
    const RunOutput r = run_dtrain({"run", "--config", tmp.write("comma.json", text)});
    check_error(r, kConfigError, {"comma.json:" + std::to_string(line) + ":", "malformed JSON"});
  }
  SECTION("the file ends early") {
    std::string text = small_mlp_job().dump(2);
    text.resize(text.size() / 2);
    const RunOutput r = run_dtrain({"run", "--config", tmp.write("cut.json", text)});
    check_error(r, kConfigError, {"cut.json:", "malformed JSON"});
  }
}

TEST_CASE("an unknown key is exit 2, names the key and suggests the closest valid one", "[integration]") {
  TempDir tmp;
  SECTION("'filter' in a Conv2D layer") {
    nlohmann::json job = small_cnn_job();
    job["model"]["layers"][0]["filter"] = job["model"]["layers"][0]["filters"];
    job["model"]["layers"][0].erase("filters");
    check_error(run_job(tmp, job), kConfigError, {"model.layers[0]", "'filter'", "did you mean 'filters'"});
  }
  SECTION("'epoch' in the train section") {
    nlohmann::json job = small_mlp_job();
    job["train"]["epoch"] = 3;
    job["train"].erase("epochs");
    check_error(run_job(tmp, job), kConfigError, {"train", "'epoch'", "did you mean 'epochs'"});
  }
  SECTION("'epoch' given with --set") {
    check_error(run_job(tmp, small_mlp_job(), {"--set", "train.epoch=2"}), kConfigError,
                {"'epoch'", "did you mean 'epochs'", "--set train.epoch=2"});
  }
}

TEST_CASE("an unknown layer, optimizer or loss type is exit 2 and lists the valid ones", "[integration]") {
  TempDir tmp;
  nlohmann::json job = small_mlp_job();
  SECTION("layer type") {
    job["model"]["layers"][1]["type"] = "Dens";
    check_error(run_job(tmp, job), kConfigError,
                {"model.layers[1].type", "'Dens'", "Dense", "Conv2D", "MaxPooling2D", "Flatten", "Dropout",
                 "BatchNormalization"});
  }
  SECTION("optimizer type") {
    job["optimizer"]["type"] = "nadam";
    check_error(run_job(tmp, job), kConfigError,
                {"optimizer.type", "'nadam'", "sgd", "adam", "adamw", "rmsprop", "adagrad"});
  }
  SECTION("loss type") {
    job["loss"]["type"] = "hinge";
    check_error(run_job(tmp, job), kConfigError,
                {"loss.type", "'hinge'", "sparse_categorical_crossentropy", "categorical_crossentropy", "mse"});
  }
}

TEST_CASE("a value of the wrong type is exit 2 and names its JSON path", "[integration]") {
  TempDir tmp;
  nlohmann::json job = small_mlp_job();
  SECTION("units given as a string") {
    job["model"]["layers"][2]["units"] = "64";
    check_error(run_job(tmp, job), kConfigError, {"model.layers[2].units", "\"64\""});
  }
  SECTION("epochs given as a string") {
    job["train"]["epochs"] = "1";
    check_error(run_job(tmp, job), kConfigError, {"train.epochs", "\"1\""});
  }
  SECTION("layers given as an object") {
    job["model"]["layers"] = {{"type", "Dense"}};
    check_error(run_job(tmp, job), kConfigError, {"model.layers"});
  }
}

TEST_CASE("Dense right after Conv2D without Flatten is exit 2 naming the layer and the shapes",
          "[integration]") {
  TempDir tmp;
  const nlohmann::json layers = nlohmann::json::array(
      {{{"type", "Conv2D"}, {"filters", 4}, {"kernel_size", 3}}, {{"type", "Dense"}, {"units", 4}}});
  // A 3x3 'valid' convolution turns (28, 28, 1) into (26, 26, 4).
  check_error(run_job(tmp, synthetic_job({28, 28, 1}, layers)), kConfigError,
              {"model.layers[1]", "Dense", "(26, 26, 4)", "Flatten"});
}

TEST_CASE("a 5x5 kernel on a 3x3 image is exit 2 naming the layer and both shapes", "[integration]") {
  TempDir tmp;
  const nlohmann::json layers = nlohmann::json::array({{{"type", "Conv2D"}, {"filters", 4}, {"kernel_size", 5}},
                                                       {{"type", "Flatten"}},
                                                       {{"type", "Dense"}, {"units", 4}}});
  check_error(run_job(tmp, synthetic_job({3, 3, 1}, layers)), kConfigError,
              {"model.layers[0]", "Conv2D", "5x5", "(3, 3, 1)"});
}

TEST_CASE("a non-positive batch size or epoch count given with --set is exit 2 naming the key",
          "[integration]") {
  TempDir tmp;
  const nlohmann::json job = small_mlp_job();
  SECTION("batch size 0") {
    check_error(run_job(tmp, job, {"--set", "train.batch_size_per_replica=0"}), kConfigError,
                {"train.batch_size_per_replica"});
  }
  SECTION("batch size -8") {
    check_error(run_job(tmp, job, {"--set", "train.batch_size_per_replica=-8"}), kConfigError,
                {"train.batch_size_per_replica", "-8"});
  }
  SECTION("epochs 0") {
    check_error(run_job(tmp, job, {"--set", "train.epochs=0"}), kConfigError, {"train.epochs"});
  }
  SECTION("epochs -1") {
    check_error(run_job(tmp, job, {"--set", "train.epochs=-1"}), kConfigError, {"train.epochs", "-1"});
  }
}

TEST_CASE("a --set value of the wrong type is exit 2 naming the key and the value", "[integration]") {
  TempDir tmp;
  check_error(run_job(tmp, small_mlp_job(), {"--set", "train.epochs=abc"}), kConfigError,
              {"train.epochs", "abc"});
}

TEST_CASE("a --set without '=' is exit 2", "[integration]") {
  TempDir tmp;
  check_error(run_job(tmp, small_mlp_job(), {"--set", "train.epochs"}), kConfigError, {"train.epochs", "'='"});
}

TEST_CASE("an unknown subcommand is exit 2 with dtrain: error:", "[integration]") {
  check_error(run_dtrain({"train", "--config", shipped_config_path("fashion_mnist_mlp.json")}), kConfigError,
              {});
  // (plain `dtrain` prints the help: test_cli.cpp)
}

TEST_CASE("run, validate and bench without --config are exit 2 naming --config", "[integration]") {
  check_error(run_dtrain({"run"}), kConfigError, {"--config"});
  check_error(run_dtrain({"validate"}), kConfigError, {"--config"});
  check_error(run_dtrain({"bench", "train"}), kConfigError, {"--config"});
}

TEST_CASE("a bad option value on the command line is exit 2", "[integration]") {
  const std::string config = shipped_config_path("fashion_mnist_mlp.json");
  check_error(run_dtrain({"run", "--config", config, "--threads", "0"}), kConfigError, {"--threads"});
  check_error(run_dtrain({"run", "--config", config, "--threads", "many"}), kConfigError, {"--threads"});
  check_error(run_dtrain({"run", "--config", config, "--no-such-option"}), kConfigError, {"--no-such-option"});
}

TEST_CASE("validate gives the same exit code and message as run for bad configs", "[integration]") {
  TempDir tmp;
  struct Case {
    const char* what;
    std::string config;
    std::vector<std::string> extra;
    int exit_code;
  };
  nlohmann::json unknown_key = small_cnn_job();
  unknown_key["model"]["layers"][0]["filter"] = 8;
  nlohmann::json wrong_type = small_mlp_job();
  wrong_type["model"]["layers"][1]["units"] = "64";
  nlohmann::json bad_loss = small_mlp_job();
  bad_loss["loss"]["type"] = "hinge";
  const nlohmann::json no_flatten = synthetic_job(
      {28, 28, 1}, nlohmann::json::array({{{"type", "Conv2D"}, {"filters", 4}, {"kernel_size", 3}},
                                          {{"type", "Dense"}, {"units", 4}}}));
  const std::vector<Case> cases = {
      {"malformed JSON", tmp.write("broken.json", "{\"model\": [1, 2,, 3]}"), {}, kConfigError},
      {"unknown key", write_job(tmp, unknown_key, "unknown_key.json"), {}, kConfigError},
      {"wrong value type", write_job(tmp, wrong_type, "wrong_type.json"), {}, kConfigError},
      {"unknown loss", write_job(tmp, bad_loss, "bad_loss.json"), {}, kConfigError},
      {"Dense after Conv2D", write_job(tmp, no_flatten, "no_flatten.json"), {}, kConfigError},
      {"--set epochs=0", write_job(tmp, small_mlp_job(), "ok.json"), {"--set", "train.epochs=0"}, kConfigError},
      {"--set type mismatch", tmp.file("ok.json"), {"--set", "train.epochs=abc"}, kConfigError},
      {"missing config file", tmp.file("nowhere.json"), {}, 3},
  };
  for (const Case& c : cases) {
    INFO("case: " << c.what);
    std::vector<std::string> run_args = {"run", "--config", c.config};
    run_args.insert(run_args.end(), c.extra.begin(), c.extra.end());
    std::vector<std::string> validate_args = run_args;
    validate_args[0] = "validate";
    const RunOutput ran = run_dtrain(run_args);
    const RunOutput validated = run_dtrain(validate_args);
    check_error(ran, c.exit_code, {});
    check_error(validated, c.exit_code, {});
    // The same problem gives the same message (the last line of stderr).
    auto last_line = [](std::string text) {
      while (!text.empty() && text.back() == '\n') text.pop_back();
      return text.substr(text.find_last_of('\n') + 1);
    };
    CHECK(last_line(validated.err) == last_line(ran.err));
  }
}

TEST_CASE("train.precision mixed_float16 is exit 2 on the CPU and with central_storage, naming the fix",
          "[integration]") {
  TempDir tmp;
  nlohmann::json job = synthetic_job({6}, nlohmann::json::array({{{"type", "Dense"}, {"units", 4}}}));
  job["train"]["precision"] = "mixed_float16";
  job["device"] = "cpu";
  check_error(run_job(tmp, job), kConfigError, {"train.precision", "mixed_float16", "CPU", "mixed_bfloat16"});
  check_error(run_job(tmp, job, {}, "validate"), kConfigError, {"train.precision", "CPU", "mixed_bfloat16"});
  // validate checks the strategy before the device.
  job["strategy"] = {{"type", "central_storage"}, {"replicas", 2}};
  check_error(run_job(tmp, job, {}, "validate"), kConfigError,
              {"train.precision", "central_storage", "mixed_bfloat16"});
}

}  // namespace dtrain::integration
