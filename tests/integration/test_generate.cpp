// dtrain generate end to end: the shipped GPT (configs/gpt_fortunes.json)
// trained for a few steps into a temporary directory, then sampled from its
// checkpoint: the prompt and then exactly --max-tokens bytes, the same text for
// the same seed, past the model's 128-byte window (the key/value cache is
// refilled from the last half window), the most likely byte each time at
// temperature 0; and the errors: no checkpoint (exit 3, says to train first),
// a model that is no language model (exit 2).
#include <catch2/catch.hpp>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

nlohmann::json tiny_fortunes_job(const TempDir& dir) {
  nlohmann::json job = shipped_config("gpt_fortunes.json");
  job["train"]["epochs"] = 1;
  job["train"]["steps_per_epoch"] = 3;
  job["train"]["batch_size_per_replica"] = 4;
  job["data"]["train"]["take"] = 64;
  job["data"]["test"]["take"] = 8;
  job["output"]["dir"] = dir.file("out");
  return job;
}

}  // namespace

TEST_CASE("generate samples bytes from the trained GPT's checkpoint, reproducibly, past its window") {
  TempDir dir;
  const std::string config = write_job(dir, tiny_fortunes_job(dir));
  const RunOutput train = run_dtrain({"run", "--config", config, "--threads", "1"}, {240.0, ""});
  INFO(describe(train));
  REQUIRE(train.exit_code == 0);

  auto generate = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"generate", "--config", config, "--prompt", "Q: ", "--max-tokens", "300"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_dtrain(args, {120.0, ""});
  };
  const RunOutput a = generate({"--seed", "7", "--temperature", "0.9", "--top-k", "20"});
  INFO(describe(a));
  REQUIRE(a.exit_code == 0);
  CHECK_THAT(a.err, Catch::Contains("(step 3), 300 tokens at"));
  REQUIRE(a.out.size() == 3 + 300 + 1);  // the prompt, the bytes, a newline
  CHECK(a.out.substr(0, 3) == "Q: ");
  const RunOutput b = generate({"--seed", "7", "--temperature", "0.9", "--top-k", "20"});
  CHECK(b.out == a.out);
  const RunOutput c = generate({"--seed", "8", "--temperature", "0.9", "--top-k", "20"});
  CHECK(c.out != a.out);
  const RunOutput greedy1 = generate({"--temperature", "0", "--seed", "1"});
  const RunOutput greedy2 = generate({"--temperature", "0", "--seed", "2"});
  CHECK(greedy1.exit_code == 0);
  CHECK(greedy1.out == greedy2.out);  // the most likely byte: the seed plays no part
}

TEST_CASE("generate without a checkpoint, or from a model that is no language model, says what is wrong") {
  TempDir dir;
  const RunOutput none = run_dtrain({"generate", "--config", write_job(dir, tiny_fortunes_job(dir)), "--prompt", "x"});
  check_error(none, 3, {"no such checkpoint directory", "train first (dtrain run)"});
  const RunOutput mlp = run_dtrain({"generate", "--config", shipped_config_path("fashion_mnist_mlp.json")});
  check_error(mlp, 2, {"a language model maps token ids (time,) to logits (time, vocabulary)"});
}

}  // namespace dtrain::integration
