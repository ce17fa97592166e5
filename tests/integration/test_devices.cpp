// Devices from the command line: `dtrain devices` lists the GPUs or says why
// there are none, a job that asks for a GPU where none is usable is exit 2
// naming the reason and the fix (never a crash), "auto" trains on what there is,
// and a misspelt device is a config error at its JSON path.
#include <catch2/catch.hpp>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

bool machine_has_gpu() {
  const RunOutput r = run_dtrain({"devices", "--json"});
  REQUIRE(r.exit_code == 0);
  return !nlohmann::json::parse(r.out).at("gpus").empty();
}

}  // namespace

TEST_CASE("dtrain devices lists GPUs or says why there are none", "[integration]") {
  const RunOutput text = run_dtrain({"devices"});
  INFO(describe(text));
  CHECK(text.exit_code == 0);
  const RunOutput json = run_dtrain({"devices", "--json"});
  INFO(describe(json));
  REQUIRE(json.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  if (j.at("gpus").empty()) {
    // The reason is named: no CUDA backend, no driver, or no device.
    const std::string why = j.at("why_none").get<std::string>();
    CHECK_THAT(why, Catch::Matchers::Contains("driver") || Catch::Matchers::Contains("device") ||
                        Catch::Matchers::Contains("CUDA backend"));
    CHECK_THAT(text.out, Catch::Matchers::Contains("No usable GPU: " + why));
  } else {
    for (const auto& g : j.at("gpus")) {
      CHECK(g.at("total_bytes").get<uint64_t>() > 0);
      CHECK_THAT(text.out, Catch::Matchers::Contains(g.at("name").get<std::string>()));
    }
  }
}

TEST_CASE("asking for a GPU where none is usable is exit 2 with the reason", "[integration]") {
  TempDir dir;
  nlohmann::json job = small_mlp_job(256, 64);
  job["device"] = "gpu";
  const RunOutput r = run_dtrain({"run", "--config", write_job(dir, job)});
  INFO(describe(r));
  if (machine_has_gpu()) {
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Matchers::Contains("cuda:0"));
  } else {
    check_error(r, 2, {"device: \"gpu\" asks for a GPU, but none is usable", "\"device\": \"cpu\""});
  }
  // A GPU index beyond what the machine has is the same kind of error on any machine.
  job["device"] = "cuda:99";
  check_error(run_dtrain({"run", "--config", write_job(dir, job)}), 2, {"cuda:99"});
}

TEST_CASE("device auto trains on what the machine has and says which", "[integration]") {
  TempDir dir;
  nlohmann::json job = small_mlp_job(256, 64);
  job["train"]["epochs"] = 1;
  const std::string summary = dir.file("summary.json");
  const RunOutput r = run_dtrain({"run", "--config", write_job(dir, job), "--summary", summary});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const std::string device = read_json_file(summary).at("device").get<std::string>();
  CHECK(device == (machine_has_gpu() ? "cuda:0" : "cpu:0"));
  CHECK_THAT(r.out, Catch::Matchers::Contains(device));
}

TEST_CASE("a misspelt device is a config error at its JSON path", "[integration]") {
  TempDir dir;
  nlohmann::json job = small_mlp_job(256, 64);
  job["device"] = "tpu:0";
  check_error(run_dtrain({"validate", "--config", write_job(dir, job)}), 2,
              {"device", "'tpu:0' is not a device", "\"auto\""});
}

}  // namespace dtrain::integration
