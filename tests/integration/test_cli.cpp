// The parts of dtrain's command line that do not train: `version` and `--version`
// print the version this build was configured with, `--help` and `run --help` exit 0
// and document the options, and `validate` on the shipped configs exits 0 and says
// what it checked (the JSON, the model, both data sources) without training, then the
// task's execution plan (text, and JSON with --json) under a launch-like TF_CONFIG;
// `cluster` prints what a resolver gives (Slurm variables) or names a bad variable.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "comm/nccl/nccl_support.h"
#include "core/strings.h"
#include "integration/job_files.h"
#include "integration/run_dtrain.h"

#ifndef DTRAIN_EXPECTED_VERSION
#error "DTRAIN_EXPECTED_VERSION (the project version) must be defined by the build"
#endif

namespace dtrain::integration {

TEST_CASE("dtrain version and dtrain --version print the version", "[integration]") {
  const std::string expected = std::string("dtrain ") + DTRAIN_EXPECTED_VERSION;
  for (const char* arg : {"version", "--version"}) {
    const RunOutput r = run_dtrain({arg});
    INFO(describe(r));
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Matchers::StartsWith(expected));
    CHECK(r.err.empty());
  }
  // `version` also names the backends this build has and their libraries.
  const RunOutput r = run_dtrain({"version"});
  CHECK_THAT(r.out, Catch::Matchers::Contains("backends: cpu (oneDNN "));
  CHECK_THAT(r.out, Catch::Matchers::Contains("cuda (CUDA runtime ") || Catch::Matchers::Contains("cuda: not built"));
  // And the collectives' engines, NCCL's version where the build has it.
  CHECK_THAT(r.out, Catch::Matchers::Contains("collectives: Gloo (TCP), shared memory, "));
  CHECK_THAT(r.out, Catch::Matchers::Contains(comm::kNcclBuilt ? "NCCL 2." : "NCCL: not in this build"));
}

TEST_CASE("dtrain --help exits 0 and lists the subcommands", "[integration]") {
  const RunOutput r = run_dtrain({"--help"});
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  for (const char* word : {"run", "validate", "bench", "version", "--version"})
    CHECK_THAT(r.out, Catch::Matchers::Contains(word));
}

TEST_CASE("dtrain run --help exits 0 and documents the options", "[integration]") {
  const RunOutput r = run_dtrain({"run", "--help"});
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  for (const char* option : {"--config", "--set", "--threads", "--summary"})
    CHECK_THAT(r.out, Catch::Matchers::Contains(option));
}

TEST_CASE("plain dtrain prints the help, and run and launch --help have examples and the environment", "[integration]") {
  const RunOutput plain = run_dtrain({});
  INFO(describe(plain));
  CHECK(plain.exit_code == 0);
  CHECK(plain.err.empty());
  CHECK_THAT(plain.out, Catch::Matchers::Contains("Subcommands:"));
  CHECK_THAT(plain.out, Catch::Matchers::Contains("dtrain launch --workers 2 --config"));
  const RunOutput run = run_dtrain({"run", "--help"});
  for (const char* word : {"Examples:", "Environment:", "TF_CONFIG", "DTRAIN_JOB_SECRET", "OMP_NUM_THREADS", "Exit codes"})
    CHECK_THAT(run.out, Catch::Matchers::Contains(word));
  const RunOutput launch = run_dtrain({"launch", "--help"});
  for (const char* word : {"Examples:", "--hostfile hosts.txt", "logs/<task>.log"})
    CHECK_THAT(launch.out, Catch::Matchers::Contains(word));
}

TEST_CASE("usage errors say what an option expects and point to the subcommand's help", "[integration]") {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"launch", "--workers", "abc", "--config", "x.json"},
       "--workers: expected a whole number >= 1, or M:N (elastic), got 'abc' (run 'dtrain launch --help' for usage)"},
      {{"launch", "--grace-period", "-1", "--config", "x.json"}, "--grace-period: expected a number of seconds >= 0 and at most 1e7, got '-1'"},
      {{"launch", "--port-base", "70000", "--config", "x.json"},
       "--port-base: expected a whole number from 1 to 65535, got '70000'"},
      {{"bench", "attention", "--seq", "0"}, "(run 'dtrain bench attention --help' for usage)"},
      {{"run", "--config", "x.json", "--set", "train.epochs", "1"},
       "--set 'train.epochs' has no '=' (then '1'): write --set train.epochs=1"},
      {{"run", "--config", "x.json", "--set", "train.epochs"}, "write --set train.epochs=VALUE"},
      // Typos and other tools' words: dtrain's own words, with the closest command or option.
      {{"train", "--config", "x.json"}, "unknown command 'train' for 'dtrain' (did you mean 'run'?) (run 'dtrain --help'"},
      {{"rnu"}, "unknown command 'rnu' for 'dtrain' (did you mean 'run'?)"},
      {{"bench", "trian"}, "unknown command 'trian' for 'dtrain bench' (did you mean 'train'?)"},
      {{"run", "--config", "x.json", "--epochs", "1"},
       "'--epochs' is no option of 'dtrain run': it is a key of the job file here: --set train.epochs=N"},
      {{"run", "--confg", "x.json"}, "unknown option '--confg' for 'dtrain run' (did you mean '--config'?)"},
      {{"bench", "train", "--config", "x.json", "--stesp", "3"},
       "unknown option '--stesp' for 'dtrain bench train' (did you mean '--steps'?)"},
  };
  for (const Case& c : cases) {
    const RunOutput r = run_dtrain(c.args);
    INFO(describe(r));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Matchers::StartsWith("dtrain: error: "));
    CHECK_THAT(r.err, Catch::Matchers::Contains(c.says));
    CHECK_THAT(r.err, !Catch::Matchers::Contains("17976931348623157"));
    CHECK_THAT(r.err, !Catch::Matchers::Contains("were not expected"));  // (CLI11's raw words)
  }
}

TEST_CASE("ckpt inspect on a job's output directory that holds no checkpoint says the job saved none",
          "[integration]") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("out"));
  const std::string out = dir.file("out");
  dir.write("out/metrics.jsonl", "{}\n");
  const RunOutput r = run_dtrain({"ckpt", "inspect", out});
  check_error(r, 3, {"is a job's output directory (it holds metrics.jsonl) with no checkpoint", "saved none",
                     "checkpoint.every_epochs"});
}

namespace {
std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
}  // namespace

TEST_CASE("a run does not overwrite an earlier run's results unless asked: --resume, another output.dir, --overwrite",
          "[integration]") {
  TempDir dir;
  nlohmann::json job = small_mlp_job(1024, 128);
  job["train"]["epochs"] = 2;
  job["output"] = {{"dir", dir.file("out")}};
  job["checkpoint"] = {{"every_epochs", 1}};
  const std::string config = write_job(dir, job);
  const RunOutput first = run_dtrain({"run", "--config", config, "--threads", "1"});
  INFO(describe(first));
  REQUIRE(first.exit_code == 0);
  const std::string metrics = dir.file("out/metrics.jsonl");
  const std::string before = file_text(metrics);

  // Again, as it was: refused before anything is written, naming the ways on.
  const RunOutput again = run_dtrain({"run", "--config", config, "--threads", "1"});
  check_error(again, 2, {"output.dir '" + dir.file("out") + "' holds an earlier run's results",
                         "metrics.jsonl; 2 checkpoints in checkpoints/, the newest of step 16",
                         "--resume continues that run", "--set output.dir=" + dir.file("out") + "-2 writes a new one",
                         "--overwrite replaces them"});
  CHECK(file_text(metrics) == before);
  // launch refuses once, before any task starts.
  const RunOutput launched = run_dtrain({"launch", "--workers", "2", "--config", config, "--threads", "1"});
  check_error(launched, 2, {"holds an earlier run's results"});
  CHECK_THAT(launched.err, !Catch::Contains("[worker:"));
  CHECK(file_text(metrics) == before);

  // --overwrite: a run of 1 epoch replaces them; the earlier checkpoints (of a
  // higher step) are gone, so its own is the newest.
  const RunOutput over = run_dtrain({"run", "--config", config, "--threads", "1", "--overwrite", "--set",
                                     "train.epochs=1"});
  INFO(describe(over));
  REQUIRE(over.exit_code == 0);
  CHECK_THAT(over.err, Catch::Contains("--overwrite: removed the earlier run's 2 checkpoint(s)"));
  CHECK(std::filesystem::exists(dir.file("out/checkpoints/ckpt-00000008")));
  CHECK_FALSE(std::filesystem::exists(dir.file("out/checkpoints/ckpt-00000016")));
  CHECK(read_json_lines(metrics).size() < static_cast<size_t>(std::count(before.begin(), before.end(), '\n')));
  // --resume continues it (an epoch more).
  const RunOutput resumed = run_dtrain({"run", "--config", config, "--threads", "1", "--resume"});
  INFO(describe(resumed));
  CHECK(resumed.exit_code == 0);
  CHECK(std::filesystem::exists(dir.file("out/checkpoints/ckpt-00000016")));
}

TEST_CASE("the plan says how OpenMP's threads wait: dtrain's spin count, or the environment's choice",
          "[integration]") {
  TempDir dir;
  const std::string config = write_job(dir, small_mlp_job(256, 64));
  const RunOutput chosen = run_dtrain({"validate", "--config", config});
  INFO(describe(chosen));
  REQUIRE(chosen.exit_code == 0);
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) {
    CHECK_THAT(chosen.out, Catch::Contains("openmp wait: ") && Catch::Contains("(the environment's)"));
  } else {
    CHECK_THAT(chosen.out, Catch::Contains("openmp wait: GOMP_SPINCOUNT=30000 (dtrain's choice"));
  }
  const RunOutput given = run_program("/usr/bin/env", {"OMP_WAIT_POLICY=passive", dtrain_binary(), "validate",
                                                       "--config", config});
  INFO(describe(given));
  CHECK_THAT(given.out, Catch::Contains("openmp wait: OMP_WAIT_POLICY=passive (the environment's)"));
}

TEST_CASE("dtrain validate accepts the shipped configs and says what it checked", "[integration]") {
  for (const char* name : {"fashion_mnist_mlp.json", "fashion_mnist_cnn.json"}) {
    const std::string config = shipped_config_path(name);
    const RunOutput r = run_dtrain({"validate", "--config", config});
    INFO(describe(r));
    CHECK(r.exit_code == 0);
    CHECK(r.err.empty());
    for (const char* checked : {"model", "data.train", "data.test", "60000", "10000", "(28, 28, 1)"})
      CHECK_THAT(r.out, Catch::Matchers::Contains(checked));
    CHECK_THAT(r.out, Catch::Matchers::Contains(config + " is valid"));
    // validate must not train.
    CHECK_THAT(r.out, !Catch::Matchers::Contains("Epoch"));
  }
}

// The number of times `needle` occurs in `text`.
size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

TEST_CASE("a softmax output layer with a loss from_logits is warned about once by validate and run", "[integration]") {
  TempDir dir;
  nlohmann::json job = small_mlp_job(256, 64);
  job["train"]["batch_size_per_replica"] = 64;
  const std::string linear = write_job(dir, job, "linear.json");
  job["model"]["layers"].back()["activation"] = "softmax";
  const std::string softmax = write_job(dir, job, "softmax.json");
  const std::string warning = "dtrain: warning: " + softmax +
                              ": loss: sparse_categorical_crossentropy has from_logits true, but the model's output "
                              "layer model.layers[3] (Dense) applies a softmax";
  for (const char* command : {"validate", "run"}) {
    const RunOutput r = run_dtrain({command, "--config", softmax, "--threads", "1"}, {120.0, ""});
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);  // a warning, not an error
    CHECK(occurrences(r.err, warning) == 1);
    CHECK(occurrences(r.err, "dtrain: warning:") == 1);
  }
  const RunOutput plain = run_dtrain({"validate", "--config", linear, "--threads", "1"});
  INFO(describe(plain));
  REQUIRE(plain.exit_code == 0);
  CHECK_THAT(plain.err, !Catch::Matchers::Contains("warning"));
}

// A port nobody listens on now (the kernel's pick on 127.0.0.1, released again).
int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST_CASE("dtrain validate prints the task's execution plan, and with --json as the last line", "[integration]") {
  // worker:1 of a launch-like cluster: two workers on 127.0.0.1.
  const std::string tf_config =
      str(R"({"cluster": {"worker": ["127.0.0.1:)", unused_port(), R"(", "127.0.0.1:)", unused_port(),
          R"("]}, "task": {"type": "worker", "index": 1}})");
  const std::string config = shipped_config_path("fashion_mnist_cnn_multiworker.json");
  const RunOutput text = run_program("/usr/bin/env", {"TF_CONFIG=" + tf_config, dtrain_binary(), "validate",
                                                      "--config", config});
  INFO(describe(text));
  REQUIRE(text.exit_code == 0);
  for (const char* line : {"plan for worker:1:", "role: train (worker:1 of the cluster from TF_CONFIG",
                           "training tasks: hierarchical: shared memory within a machine, Gloo between machines "
                           "(auto: 2 training tasks on 1 machine",
                           "gradients: all-reduced over the training tasks' group", "threads: "})
    CHECK_THAT(text.out, Catch::Matchers::Contains(line));

  const RunOutput json_run = run_program("/usr/bin/env", {"TF_CONFIG=" + tf_config, dtrain_binary(), "validate",
                                                          "--config", config, "--json"});
  INFO(describe(json_run));
  REQUIRE(json_run.exit_code == 0);
  const std::string out = json_run.out;
  const size_t start = out.rfind('\n', out.size() - 2);
  const nlohmann::json plan = nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1));
  CHECK(plan["task"] == "worker:1");
  CHECK(plan["role"] == "train");
  CHECK(plan["rank"] == 1);
  CHECK(plan["training_tasks"] == 2);
  CHECK(plan["strategy"] == "multi_worker_mirrored");
  CHECK(plan["devices"] == nlohmann::json::array({"cpu:0"}));
  REQUIRE(plan["decisions"].is_array());
  for (const auto& d : plan["decisions"]) {
    INFO(d.dump());
    CHECK_FALSE(d["why"].get<std::string>().empty());
  }
}

}  // namespace dtrain::integration

namespace dtrain::integration {

TEST_CASE("bench train --profile times every layer, within the step time", "[integration]") {
  TempDir dir;
  nlohmann::json job = small_cnn_job(256, 64);
  const RunOutput r = run_dtrain({"bench", "train", "--config", write_job(dir, job), "--steps", "3", "--warmup", "1",
                                  "--profile", "3", "--threads", "1", "--json"});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& profile = j.at("profile");
  const double step_ms = profile.at("step_ms").get<double>();
  CHECK(step_ms > 0.0);
  std::vector<std::string> types;
  double layers_ms = 0.0;
  for (const auto& l : profile.at("layers")) {
    types.push_back(l.at("type").get<std::string>());
    CHECK(l.at("forward_ms").get<double>() >= 0.0);
    CHECK(l.at("backward_ms").get<double>() >= 0.0);
    layers_ms += l.at("forward_ms").get<double>() + l.at("backward_ms").get<double>();
  }
  // One entry per layer of the model, in order, and the layers fit inside the step.
  CHECK(types == std::vector<std::string>{"Conv2D", "MaxPooling2D", "Flatten", "Dense", "Dropout", "Dense"});
  CHECK(profile.at("layers")[0].at("forward_ms").get<double>() > 0.0);
  CHECK(profile.at("layers")[0].at("depth") == 0);
  CHECK(layers_ms <= step_ms);
}

TEST_CASE("bench train --profile lists the layers inside a Residual block under it", "[integration]") {
  TempDir dir;
  nlohmann::json job = small_cnn_job(256, 64);
  const nlohmann::json conv = {{"type", "Conv2D"}, {"filters", 8}, {"kernel_size", 3}, {"padding", "same"}};
  job["model"]["layers"] = {conv,
                            {{"type", "Residual"},
                             {"layers", {conv, {{"type", "Activation"}, {"activation", "relu"}}, conv}},
                             {"activation", "relu"}},
                            {{"type", "GlobalAveragePooling2D"}},
                            {{"type", "Dense"}, {"units", 10}}};
  const RunOutput r = run_dtrain({"bench", "train", "--config", write_job(dir, job), "--steps", "2", "--warmup", "1",
                                  "--profile", "2", "--threads", "1", "--json"});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json layers = nlohmann::json::parse(r.out).at("profile").at("layers");
  std::vector<std::string> rows;
  for (const auto& l : layers) rows.push_back(std::to_string(l.at("depth").get<int>()) + " " + l.at("layer").get<std::string>());
  CHECK(rows == std::vector<std::string>{"0 conv2d", "0 residual", "1 conv2d_1", "1 activation", "1 conv2d_2",
                                         "0 global_average_pooling2d", "0 dense"});
  // The block's time holds its layers' (each waited for alone) and a little more.
  auto total = [&](size_t i) { return layers[i].at("forward_ms").get<double>() + layers[i].at("backward_ms").get<double>(); };
  CHECK(total(2) > 0.0);
  CHECK(total(2) + total(3) + total(4) <= total(1));
}

TEST_CASE("dtrain cluster prints the cluster a resolver gives, or names the variable it cannot read",
          "[integration]") {
  using nlohmann::json;
  const std::vector<std::string> step = {"SLURM_PROCID=1",          "SLURM_LOCALID=1",
                                         "SLURM_STEP_NUM_TASKS=3",   "SLURM_STEP_NODELIST=node[08-09]",
                                         "SLURM_STEP_TASKS_PER_NODE=2,1", "SLURM_JOB_ID=77",
                                         "SLURM_STEP_ID=2",          "SLURMD_NODENAME=node08"};
  auto run_env = [](std::vector<std::string> vars, const std::vector<std::string>& args) {
    // A clean environment (env -i) but for these variables.
    vars.insert(vars.begin(), "-i");
    vars.push_back(dtrain_binary());
    vars.insert(vars.end(), args.begin(), args.end());
    return run_program("/usr/bin/env", vars);
  };
  const RunOutput slurm = run_env(step, {"cluster", "--json"});
  INFO(describe(slurm));
  REQUIRE(slurm.exit_code == 0);
  const json j = json::parse(slurm.out);
  CHECK(j["source"] == "slurm");
  CHECK(j["cluster"]["worker"] == json({"node08:8888", "node08:8889", "node09:8888"}));
  CHECK(j["task"] == json({{"type", "worker"}, {"index", 1}}));
  CHECK(j["job_id"] == "slurm-77.2");

  const RunOutput alone = run_env({}, {"cluster"});
  CHECK(alone.exit_code == 0);
  CHECK_THAT(alone.out, Catch::Contains("source: local"));

  std::vector<std::string> bad = step;
  bad[4] = "SLURM_STEP_TASKS_PER_NODE=2(x";
  check_error(run_env(bad, {"cluster"}), 2, {"SLURM_STEP_TASKS_PER_NODE='2(x'", "cannot parse"});
}

}  // namespace dtrain::integration

namespace dtrain::integration {

TEST_CASE("run --help agrees with the README: every exit code of its table, and the secret's length",
          "[integration]") {
  const std::string readme = read_file(std::string(DTRAIN_SOURCE_DIR) + "/README.md");
  const RunOutput help = run_dtrain({"run", "--help"});
  REQUIRE(help.exit_code == 0);
  // The README's table: "| N | what |" lines after "## Errors and exit codes".
  const size_t table = readme.find("## Errors and exit codes");
  REQUIRE(table != std::string::npos);
  std::vector<std::string> codes;
  for (size_t at = readme.find("\n| ", table); at != std::string::npos && at < readme.find("\n## ", table + 1);
       at = readme.find("\n| ", at + 1)) {
    const std::string code = readme.substr(at + 3, readme.find(' ', at + 3) - (at + 3));
    if (!code.empty() && all_digits(code)) codes.push_back(code);
  }
  CHECK(codes.size() >= 9);  // 0-6, 130, 143
  for (const std::string& code : codes) {
    INFO("exit code " << code << "\n" << help.out);
    const bool listed = help.out.find(" " + code + " ") != std::string::npos ||
                        help.out.find("\n  " + code + " ") != std::string::npos;
    CHECK(listed);
  }
  // The same secret as the README's example makes.
  CHECK_THAT(readme, Catch::Contains("openssl rand -hex 32"));
  CHECK_THAT(help.out, Catch::Contains("openssl rand -hex 32") && !Catch::Contains("-hex 16"));
}

}  // namespace dtrain::integration
