// The accuracy the shipped configs promise, measured by running them unchanged to
// the end (the CNN also in train.precision mixed_bfloat16) through the dtrain binary (label `slow`: the MLP takes about half a
// minute, the CNN a few minutes on 2 cores, as does the 2-worker CNN). Each run happens in a temporary
// working directory, so the configs' relative output.dir lands there, and writes a
// --summary; the test prints the test accuracy and training throughput (WARN, so
// the figures show in the log even when the test passes) and checks the accuracy.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

// Runs the shipped config `name` unchanged; REQUIREs exit 0 and test_accuracy >= `floor`.
void check_shipped_accuracy(const std::string& name, double floor, double deadline_seconds,
                            const std::vector<std::string>& extra = {}) {
  TempDir tmp;
  const std::string summary_path = tmp.file("summary.json");
  RunSpec spec;
  spec.deadline_seconds = deadline_seconds;
  spec.cwd = tmp.path();
  std::vector<std::string> args = {"run", "--config", shipped_config_path(name), "--summary", summary_path};
  args.insert(args.end(), extra.begin(), extra.end());
  const RunOutput r = run_dtrain(args, spec);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json s = read_json_file(summary_path);
  REQUIRE(s["test_accuracy"].is_number());
  const double accuracy = s["test_accuracy"].get<double>();
  WARN(name << ": test_accuracy " << accuracy << " (needs >= " << floor << "), test_loss "
            << s["test_loss"] << ", " << s["epochs"] << " epochs, " << s["steps"] << " steps, "
            << s["train_samples_per_sec"] << " train samples/s, " << s["threads"] << " threads, "
            << s["wall_seconds"] << " s wall");
  CHECK(accuracy >= floor);
  // The shipped configs save a checkpoint every few epochs, and the last step's.
  char last[32];
  std::snprintf(last, sizeof last, "ckpt-%08lld", static_cast<long long>(s["steps"].get<int64_t>()));
  const std::string output_dir = shipped_config(name)["output"]["dir"];
  CHECK(std::filesystem::is_directory(tmp.file(output_dir + "/checkpoints/" + last)));
}

}  // namespace

TEST_CASE("the shipped MLP config reaches test accuracy >= 0.88", "[slow]") {
  check_shipped_accuracy("fashion_mnist_mlp.json", 0.88, 300.0);
}

TEST_CASE("the shipped CNN config reaches test accuracy >= 0.91", "[slow]") {
  check_shipped_accuracy("fashion_mnist_cnn.json", 0.91, 840.0);
}

TEST_CASE("the shipped CNN config in mixed_bfloat16 reaches test accuracy >= 0.91 like float32", "[slow]") {
  check_shipped_accuracy("fashion_mnist_cnn.json", 0.91, 840.0, {"--set", "train.precision=mixed_bfloat16"});
}

TEST_CASE("two workers with multi_worker_mirrored reach >= 0.91 with identical parameters", "[slow]") {
  TempDir tmp;
  const std::string summary_path = tmp.file("launch.json");
  RunSpec spec;
  spec.deadline_seconds = 900.0;
  spec.cwd = tmp.path();
  const RunOutput r = run_dtrain({"launch", "--workers", "2", "--config",
                                  shipped_config_path("fashion_mnist_cnn_multiworker.json"), "--summary", summary_path},
                                 spec);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json launch = read_json_file(summary_path);
  const nlohmann::json& chief = launch["tasks"]["worker:0"];
  const nlohmann::json& worker = launch["tasks"]["worker:1"];
  REQUIRE(chief.is_object());
  REQUIRE(worker.is_object());
  WARN("multi-worker CNN: test_accuracy " << chief["test_accuracy"] << ", world_size " << chief["world_size"]
       << ", " << chief["train_samples_per_sec"] << " train samples/s, comm_wait_share "
       << chief["comm_wait_share"] << ", params_sha256 " << chief["params_sha256"]);
  CHECK(chief["world_size"] == 2);
  CHECK(chief["test_accuracy"].get<double>() >= 0.91);
  CHECK(worker["params_sha256"] == chief["params_sha256"]);
}

}  // namespace dtrain::integration
