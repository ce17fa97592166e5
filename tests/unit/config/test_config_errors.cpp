// Tests of the job config's error messages: each names the source, the JSON path,
// what is wrong, what was found and, where one exists, the likely fix.
#include <catch2/catch.hpp>

#include "job/job_config.h"
#include "config_test_util.h"

namespace dtrain::config::test {
namespace {

// minimal_job() with model.layers replaced by `layers` (JSON text).
json with_layers(const std::string& layers) {
  json job = minimal_job();
  job["model"]["layers"] = json::parse(layers);
  return job;
}

TEST_CASE("malformed JSON is reported at line:column", "[config][errors]") {
  const std::string text =
      "{\n  \"loss\": \"mse\",\n  \"optimizer\": \"sgd\"\n  \"train\": {}\n}\n";
  // The comma is missing at the end of line 3: reported there, not at "train" on line 4.
  const std::string e = text_error(text);
  CHECK_THAT(e, Contains("job.json:3:21: malformed JSON: unexpected string literal; "
                         "expected '}' (is a ',' missing here?)"));
  const std::string e2 = text_error("[1,\n 2 3]");
  CHECK_THAT(e2, Contains("job.json:2:3: malformed JSON: unexpected number literal"));
}

TEST_CASE("a trailing comma is named as such", "[config][errors]") {
  const std::string e = text_error("{\"loss\": \"mse\",\n}");
  CHECK_THAT(e, Contains("job.json:2:1: malformed JSON"));
  CHECK_THAT(e, Contains("no comma after the last element"));
}

TEST_CASE("empty input is malformed JSON at 1:1", "[config][errors]") {
  CHECK_THAT(text_error(""), Contains("job.json:1:1: malformed JSON: unexpected end of input"));
}

TEST_CASE("the top level must be an object", "[config][errors]") {
  CHECK_THAT(text_error("[1, 2]"), Contains("job.json: a job config must be a JSON object"));
}

TEST_CASE("a duplicate key names its path", "[config][errors]") {
  const std::string e = text_error(R"({"model": {"layers": [{"type": "Dense", "units": 1,
                                                                "units": 2}]}})");
  CHECK_THAT(e, Contains("job.json: model.layers[0]: duplicate key 'units'"));
}

TEST_CASE("an unknown top-level key suggests the close one", "[config][errors]") {
  json job = minimal_job();
  job["runtim"] = json::object();
  const std::string e = config_error(job);
  CHECK_THAT(e, Contains("job.json: unknown top-level key 'runtim'; did you mean 'runtime'?"));
  CHECK_THAT(
      e, Contains("valid keys: device, strategy, model, loss, optimizer, data, train, runtime, output"));
}

TEST_CASE("a misspelt required section is reported as unknown rather than missing",
          "[config][errors]") {
  json job = minimal_job();
  job["modle"] = job["model"];
  job.erase("model");
  CHECK_THAT(config_error(job),
             Contains("job.json: unknown top-level key 'modle'; did you mean 'model'?"));
}

TEST_CASE("an unknown layer key suggests the close one and lists the valid keys",
          "[config][errors]") {
  const std::string e =
      config_error(with_layers(R"([{"type": "Conv2D", "filter": 8, "kernel_size": 3}])"));
  CHECK_THAT(e, Contains("job.json: model.layers[0]: unknown key 'filter' for a Conv2D layer; "
                         "did you mean 'filters'? (valid keys: type, name, filters, kernel_size, "
                         "strides, padding, activation, use_bias)"));
}

TEST_CASE("an unknown key with nothing close gets no suggestion", "[config][errors]") {
  const std::string e = config_error(with_layers(R"([{"type": "Flatten", "zzzzzz": 1}])"));
  CHECK_THAT(e, Contains("unknown key 'zzzzzz' for a Flatten layer (valid keys: type, name)"));
  CHECK_THAT(e, !Contains("did you mean"));
}

TEST_CASE("a key of another layer type says which type it belongs to", "[config][errors]") {
  const std::string e = config_error(with_layers(R"([{"type": "Flatten", "units": 3}])"));
  CHECK_THAT(e, Contains("model.layers[0]: unknown key 'units' for a Flatten layer; "
                         "'units' belongs to Dense layers"));
}

TEST_CASE("an unknown layer type lists the valid ones", "[config][errors]") {
  const std::string e = config_error(with_layers(R"([{"type": "Dense2D", "units": 3}])"));
  CHECK_THAT(e,
             Contains("model.layers[0].type: unknown layer type 'Dense2D'; did you mean 'Dense'?"));
  CHECK_THAT(e, Contains("(valid: Dense, Conv2D, MaxPooling2D"));
}

TEST_CASE("unknown optimizer and loss and activation and format names are suggested",
          "[config][errors]") {
  json job = minimal_job();
  job["optimizer"] = "adm";
  CHECK_THAT(config_error(job), Contains("optimizer: unknown optimizer 'adm'; did you mean 'adam'? "
                                         "(valid: sgd, adam, adamw, rmsprop, adagrad)"));
  job = minimal_job();
  job["loss"] = {{"type", "categorical_crossentropi"}};
  CHECK_THAT(config_error(job), Contains("loss.type: unknown loss 'categorical_crossentropi'; "
                                         "did you mean 'categorical_crossentropy'?"));
  job = with_layers(R"([{"type": "Dense", "units": 3, "activation": "rleu"}])");
  CHECK_THAT(config_error(job), Contains("model.layers[0].activation: unknown activation 'rleu'; "
                                         "did you mean 'relu'?"));
  job = minimal_job();
  job["data"]["train"]["format"] = "cifar";
  CHECK_THAT(config_error(job),
             Contains("data.train.format: unknown data format 'cifar'; "
                      "did you mean 'cifar10'? (valid: idx, cifar10, tfrecord, synthetic, text)"));
}

TEST_CASE("a wrongly typed value names the path and the value and its kind", "[config][errors]") {
  const std::string layers = R"([{"type": "Flatten"}, {"type": "Flatten"}, {"type": "Flatten"},
                                 {"type": "Dense", "units": "64"}])";
  CHECK_THAT(config_error(with_layers(layers)),
             Contains("job.json: model.layers[3].units: expected a positive integer, "
                      "got \"64\" (a string)"));
}

TEST_CASE("a float where an integer is needed is rejected", "[config][errors]") {
  json job = minimal_job();
  job["train"]["epochs"] = 64.0;
  CHECK_THAT(config_error(job),
             Contains("train.epochs: expected a positive integer, got 64.0 (not an integer)"));
}

TEST_CASE("booleans must be JSON booleans", "[config][errors]") {
  json job = minimal_job();
  job["data"]["cache"] = "true";
  CHECK_THAT(config_error(job),
             Contains("data.cache: expected true or false, got \"true\" (a string)"));
  job["data"]["cache"] = 1;
  CHECK_THAT(config_error(job), Contains("data.cache: expected true or false, got 1 (a number)"));
}

TEST_CASE("data.prefetch takes a count of batches or \"auto\", nothing else", "[config][errors]") {
  json job = minimal_job();
  job["data"]["prefetch"] = "fast";
  CHECK_THAT(config_error(job),
             Contains("data.prefetch: expected a number of batches (0 or more) or \"auto\", got \"fast\""));
  job["data"]["prefetch"] = "-2";
  CHECK_THAT(config_error(job), Contains("data.prefetch: expected a number of batches"));
  job["data"]["prefetch"] = -1;
  CHECK_THAT(config_error(job), Contains("data.prefetch"));
}

TEST_CASE("out-of-range values say the range and the value", "[config][errors]") {
  json job = minimal_job();
  job["train"]["batch_size_per_replica"] = 0;
  CHECK_THAT(config_error(job),
             Contains("job.json: train.batch_size_per_replica: must be a positive integer, got 0"));
  job = minimal_job();
  job["train"]["steps_per_epoch"] = -1;
  CHECK_THAT(config_error(job), Contains("train.steps_per_epoch: must be an integer >= 0, got -1"));
  job = with_layers(R"([{"type": "Dropout", "rate": 1}])");
  CHECK_THAT(config_error(job),
             Contains("model.layers[0].rate: must be a number in [0, 1), got 1"));
  job = minimal_job();
  job["optimizer"] = {{"type", "adam"}, {"learning_rate", 0}};
  CHECK_THAT(config_error(job),
             Contains("optimizer.learning_rate: must be a positive number, got 0"));
  job = minimal_job();
  job["data"]["train"]["classes"] = 1;
  CHECK_THAT(config_error(job), Contains("data.train.classes: must be an integer >= 2, got 1"));
}

TEST_CASE("a missing required key is named with its owner", "[config][errors]") {
  const json job = with_layers(R"([{"type": "Flatten"}, {"type": "Dense"}])");
  CHECK_THAT(config_error(job), Contains("job.json: model.layers[1]: a Dense layer needs 'units'"));
  const json no_type = with_layers(R"([{"units": 3}])");
  CHECK_THAT(config_error(no_type),
             Contains("model.layers[0]: a layer needs 'type' (one of Dense, Conv2D,"));
  json no_train = minimal_job();
  no_train.erase("train");
  CHECK_THAT(config_error(no_train), Contains("job.json: the job needs 'train'"));
}

TEST_CASE("a misspelt required key is reported as unknown rather than missing",
          "[config][errors]") {
  const json job = with_layers(R"([{"type": "Dense", "unit": 3}])");
  CHECK_THAT(config_error(job), Contains("model.layers[0]: unknown key 'unit' for a Dense layer; "
                                         "did you mean 'units'?"));
}

TEST_CASE("a misspelt type key is pointed out", "[config][errors]") {
  const json job = with_layers(R"([{"tpye": "Dense", "units": 3}])");
  CHECK_THAT(config_error(job), Contains("model.layers[0]: a layer needs 'type' (one of Dense,") &&
                                    Contains("; is 'tpye' a misspelling of it?"));
}

TEST_CASE("non-objects and empty layer lists and bad shapes are rejected", "[config][errors]") {
  json job = minimal_job();
  job["train"] = 5;
  CHECK_THAT(config_error(job),
             Contains("train: expected an object for the train section, got 5 (a number)"));
  CHECK_THAT(config_error(with_layers("[]")),
             Contains("model.layers: the model needs at least one layer, got an empty array"));
  CHECK_THAT(config_error(with_layers(R"({"type": "Dense"})")),
             Contains("model.layers: expected an array of layer objects, got {"));
  CHECK_THAT(config_error(with_layers(R"(["Dense"])")),
             Contains("model.layers[0]: expected a layer object"));
  job = minimal_job();
  job["model"]["input_shape"] = {1, 2, 3, 4};
  CHECK_THAT(config_error(job), Contains("model.input_shape: must have 1 to 3 dimensions"));
  job["model"]["input_shape"] = {28, 0};
  CHECK_THAT(config_error(job),
             Contains("model.input_shape[1]: must be a positive integer, got 0"));
}

TEST_CASE("strategy options: replicas only where a process holds several, nccl not for a CPU job", "[config][errors]") {
  json job = minimal_job();
  job["strategy"] = {{"type", "parameter_server"}, {"replicas", 2}};
  CHECK_THAT(config_error(job),
             Contains("strategy.replicas: only mirrored, central_storage and multi_worker_mirrored"));
  job["strategy"] = {{"type", "multi_worker_mirrored"}, {"replicas", 2}};
  CHECK(parse_job_config(job.dump(), "job.json").strategy.replicas == 2);
  job["strategy"] = {{"type", "mirrored"}, {"devices", {"cpu:0", "cpu:1", "cpu:2"}}};
  CHECK(parse_job_config(job.dump(), "job.json").strategy.replicas == 3);
  job["strategy"] = {{"type", "mirrored"}, {"devices", {"cpu:0", "tpu:1"}}};
  CHECK_THAT(config_error(job), Contains("strategy.devices[1]: 'tpu:1' is not a device"));
  job["strategy"] = {{"type", "multi_worker_mirrored"}, {"communication", "nccl"}};
  job["device"] = "cpu";  // nccl reduces GPU buffers (builds with NCCL: test_nccl_support)
  CHECK_THAT(config_error(job), Contains("strategy.communication: 'nccl'"));
  job.erase("device");
  job["strategy"] = {{"type", "multi_worker_mirrored"}, {"communication", "ring"}, {"bytes_per_pack", 0}};
  CHECK(parse_job_config(job.dump(), "job.json").strategy.bytes_per_pack == 0);
  job["data"]["shard_policy"] = "files";
  CHECK_THAT(config_error(job), Contains("did you mean 'file'?"));
  job["data"]["shard_policy"] = "off";
  job["train"]["gradient_accumulation_steps"] = 0;
  CHECK_THAT(config_error(job), Contains("train.gradient_accumulation_steps"));
}

TEST_CASE("train.batch_size, Keras' name, points at batch_size_per_replica and says what the global batch is",
          "[config][errors]") {
  json job = minimal_job();
  job["train"] = {{"batch_size", 64}};
  const std::string e = config_error(job);
  CHECK_THAT(e, Contains("job.json: train: unknown key 'batch_size' for the train section; "
                         "did you mean 'batch_size_per_replica'? The global batch is batch_size_per_replica x "
                         "the replicas in sync"));
  CHECK_THAT(e, !Contains("eval_batch_size'?"));
  // The same from the command line.
  CHECK_THAT(config_error(minimal_job(), {"train.batch_size=64"}), Contains("did you mean 'batch_size_per_replica'?"));
  // Other misspellings still get the closest key.
  job["train"] = {{"eval_batch_siz", 64}};
  CHECK_THAT(config_error(job), Contains("did you mean 'eval_batch_size'?"));
}

TEST_CASE("the checkpoint section: defaults, ranges and the resume modes", "[config][errors]") {
  json job = minimal_job();
  CHECK_FALSE(parse_job_config(job.dump(), "job.json").checkpoint.resume);
  job["checkpoint"] = {{"every_steps", 100}, {"keep", 2}, {"resume", "auto"}, {"dir", "ck"}};
  const JobConfig c = parse_job_config(job.dump(), "job.json");
  CHECK(c.checkpoint.every_steps == 100);
  CHECK(c.checkpoint.keep == 2);
  CHECK(c.checkpoint.dir == "ck");
  job["checkpoint"] = {{"keep", 0}};
  CHECK_THAT(config_error(job), Contains("checkpoint.keep"));
  job["checkpoint"] = {{"resume", "always"}};
  CHECK_THAT(config_error(job), Contains("checkpoint.resume") && Contains("auto"));
  job["checkpoint"] = {{"every_step", 5}};
  CHECK_THAT(config_error(job), Contains("did you mean 'every_steps'?"));
}

TEST_CASE("parameter_server's keys are checked, and only it takes them", "[config][errors]") {
  json job = minimal_job();
  job["strategy"] = {{"type", "parameter_server"}, {"mode", "stale"}, {"max_staleness", -1}};
  CHECK_THAT(config_error(job), Contains("strategy.max_staleness"));
  job["strategy"] = {{"type", "parameter_server"}, {"max_staleness", 2}};
  CHECK_THAT(config_error(job), Contains("applies only to \"mode\": \"stale\""));
  job["strategy"] = {{"type", "parameter_server"}, {"variable_partitioner", {{"type", "min_size"}, {"max_shards", 0}}}};
  CHECK_THAT(config_error(job), Contains("max_shards"));
  job["strategy"] = {{"type", "parameter_server"}, {"variable_partitioner", {{"type", "fixed"}}}};
  CHECK_THAT(config_error(job), Contains("num_shards"));
  job["strategy"] = {{"type", "parameter_server"}, {"variable_partitioner", {{"type", "max_size"}, {"max_shard_bytes", 0}}}};
  CHECK_THAT(config_error(job), Contains("max_shard_bytes"));
  job["strategy"] = {{"type", "parameter_server"}, {"mode", "eventually"}};
  CHECK_THAT(config_error(job), Contains("mode"));
  job["strategy"] = {{"type", "multi_worker_mirrored"}, {"mode", "sync"}};
  CHECK_THAT(config_error(job), Contains("only parameter_server takes 'mode'"));
  job["strategy"] = {{"type", "mirored"}};
  CHECK_THAT(config_error(job),
             Contains("unknown strategy type 'mirored'; did you mean 'mirrored'?"));
}

TEST_CASE("from_logits is not a key of mse", "[config][errors]") {
  json job = minimal_job();
  job["loss"] = {{"type", "mse"}, {"from_logits", true}};
  CHECK_THAT(config_error(job), Contains("loss: unknown key 'from_logits' for the mse loss; "
                                         "from_logits applies only to the crossentropy losses"));
}

TEST_CASE("a key of another data format names that format", "[config][errors]") {
  json job = minimal_job();
  job["data"]["train"] = {{"format", "idx"}, {"images", "a"}, {"labels", "b"}, {"files", {"c"}}};
  CHECK_THAT(config_error(job), Contains("data.train: unknown key 'files' for an idx source; "
                                         "'files' belongs to cifar10, tfrecord and text sources"));
  job = minimal_job();
  job["data"]["train"]["rescale"] = 0.5;
  CHECK_THAT(config_error(job), Contains("unknown key 'rescale' for a synthetic source; "
                                         "'rescale' belongs to idx, cifar10 and tfrecord sources"));
  job = minimal_job();
  job["data"]["train"] = {{"format", "cifar10"}, {"files", json::array()}};
  CHECK_THAT(config_error(job),
             Contains("data.train.files: expected a non-empty array of file names"));
}

TEST_CASE("a key of another optimizer or schedule names its owners", "[config][errors]") {
  json job = minimal_job();
  job["optimizer"] = {{"type", "sgd"}, {"beta_1", 0.9}};
  CHECK_THAT(config_error(job), Contains("optimizer: unknown key 'beta_1' for the sgd optimizer; "
                                         "'beta_1' belongs to adam and adamw optimizers"));
  job["optimizer"] = json::parse(R"({"type": "adam", "learning_rate":
      {"type": "step", "initial_learning_rate": 0.1, "decay_steps": 5, "alpha": 0.1}})");
  CHECK_THAT(config_error(job),
             Contains("optimizer.learning_rate: unknown key 'alpha' for a step "
                      "learning-rate schedule; 'alpha' belongs to cosine schedules"));
}

TEST_CASE("a schedule without decay_steps is rejected", "[config][errors]") {
  json job = minimal_job();
  job["optimizer"] = json::parse(R"({"type": "adam", "learning_rate":
      {"type": "cosine", "initial_learning_rate": 0.1}})");
  CHECK_THAT(config_error(job), Contains("optimizer.learning_rate: a cosine learning-rate schedule "
                                         "needs 'decay_steps'"));
}

TEST_CASE("BatchNormalization accepts only the channels axis", "[config][errors]") {
  const std::string e = config_error(with_layers(R"([{"type": "BatchNormalization", "axis": 1}])"));
  CHECK_THAT(e, Contains("model.layers[0].axis: only the channels axis -1 is supported"));
  CHECK_THAT(e, Contains("got 1"));
}

TEST_CASE("layer names must be unique", "[config][errors]") {
  const std::string e = config_error(with_layers(
      R"([{"type": "Dense", "units": 3, "name": "fc"}, {"type": "Dense", "units": 2, "name": "fc"}])"));
  CHECK_THAT(e, Contains("model.layers[1].name: the name 'fc' is already used by model.layers[0]"));
}

TEST_CASE("errors are ConfigErrors with the config exit code", "[config][errors]") {
  try {
    parse_job_config("{}", "job.json");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.exit_code() == ExitCode::kConfig);
    CHECK(dynamic_cast<const ConfigError*>(&e) != nullptr);
  }
}

TEST_CASE("an unreadable file is an IoError naming the file and the reason", "[config][errors]") {
  const std::string missing = DTRAIN_SOURCE_DIR "/configs/no_such_job.json";
  REQUIRE_THROWS_AS(load_job_config(missing), IoError);
  REQUIRE_THROWS_WITH(load_job_config(missing),
                      Contains("no_such_job.json") && Contains("No such file or directory"));
  REQUIRE_THROWS_WITH(load_job_config(DTRAIN_SOURCE_DIR "/configs"), Contains("Is a directory"));
}

TEST_CASE("residual blocks check their layers at nested JSON paths", "[config][errors]") {
  CHECK_THAT(config_error(with_layers(R"([{"type": "Residual"}])")),
             Contains("model.layers[0]: a Residual layer needs 'layers'"));
  CHECK_THAT(config_error(with_layers(R"([{"type": "Residual", "layers": []}])")),
             Contains("model.layers[0].layers: a Residual block needs at least one layer, got an empty array"));
  CHECK_THAT(config_error(with_layers(R"([{"type": "Residual", "layers": [{"type": "Dense"}]}])")),
             Contains("model.layers[0].layers[0]: a Dense layer needs 'units'"));
  CHECK_THAT(
      config_error(with_layers(R"([{"type": "Residual", "layers": [{"type": "Flatten"}], "shortcut": {}}])")),
      Contains("model.layers[0].shortcut: expected an array of layer objects, got {"));
  CHECK_THAT(config_error(with_layers(R"([{"type": "Dense", "units": 2, "shortcut": []}])")),
             Contains("'shortcut' belongs to Residual layers"));
  // Names are unique across the whole model, blocks included.
  CHECK_THAT(config_error(with_layers(R"([{"type": "Dense", "units": 4, "name": "fc"},
      {"type": "Residual", "layers": [{"type": "Dense", "units": 4, "name": "fc"}]}])")),
             Contains("model.layers[1].layers[0].name: the name 'fc' is already used by model.layers[0]"));
}

// Found by tests/fuzz/fuzz_job_config.cpp and by review: keys, values and --set
// text from the file went into messages raw and uncut; 100,000 nested '[' took
// gigabytes (each level kept its path) before anything was reported; numbers that
// become ints (ports, counts) wrapped around.
TEST_CASE("text from the file is quoted escaped and cut short", "[config][errors]") {
  json job = minimal_job();
  job["train"]["ep\x01ochs"] = 1;
  CHECK_THAT(config_error(job), Contains("job.json: train: unknown key 'ep\\x01ochs' for the train section"));
  job = minimal_job();
  job["train"][std::string(300, 'k')] = 1;
  const std::string e = config_error(job);
  CHECK_THAT(e, Contains("unknown key '" + std::string(80, 'k') + "...'"));
  CHECK(e.size() < 500);
  job = minimal_job();
  job["device"] = "cuda:\x7f";
  CHECK_THAT(config_error(job), Contains("'cuda:\\x7f' is not a device"));
  CHECK_THAT(config_error(minimal_job(), {"train.epo\tchs=\xff"}),
             Contains("--set train.epo\\tchs=\\xff:") || Contains("(from --set train.epo\\tchs=\\xff)"));
  CHECK_THAT(text_error("{\"loss\": \"mse\",\n \xc3\x28}"), Contains("job.json:2:") && Contains("\\xc3"));
}

TEST_CASE("JSON nested deeper than 100 levels is an error, found early", "[config][errors]") {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_THAT(text_error(deep), Contains("job.json: ") && Contains("nested deeper than 100 levels"));
  CHECK_THAT(text_error(R"({"a": )" + std::string(200, '[')), Contains("nested deeper than 100 levels"));
}

TEST_CASE("ports and counts that would not fit an int are errors", "[config][errors]") {
  json job = minimal_job();
  job["runtime"]["port_base"] = 4294976184LL;  // 2^32 + 8888 became 8888
  CHECK_THAT(config_error(job), Contains("runtime.port_base: must be at most 65535 (a port), got 4294976184"));
  job = minimal_job();
  job["runtime"]["slurm_jobs"] = {{"worker", 4294967297LL}};  // became 1
  CHECK_THAT(config_error(job), Contains("runtime.slurm_jobs.worker: must be at most 65536"));
  job = minimal_job();
  job["runtime"]["kubernetes"] = {{"port", 70000}};
  CHECK_THAT(config_error(job), Contains("runtime.kubernetes.port: must be at most 65535"));
}

}  // namespace
}  // namespace dtrain::config::test
