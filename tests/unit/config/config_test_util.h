// Helpers shared by the config tests: a minimal valid job and error capture.
//
// Tests start from minimal_job() (every required key, nothing else), change one
// thing with nlohmann/json, and parse the result as "job.json". config_error() (for a
// JSON value) and text_error() (for raw text) return
// the ConfigError message (and fails the test when nothing, or something else, is
// thrown), so a test can check the path, the value and the suggestion in it.
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "job/job_config.h"
#include "core/error.h"

namespace dtrain::config::test {

using Catch::Matchers::Contains;
using job::JobConfig;
using job::load_job_config;
using job::parse_job_config;
using nlohmann::json;

inline json minimal_job() {
  return json::parse(R"({
    "model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 2}]},
    "loss": "mse",
    "optimizer": "sgd",
    "data": {"train": {"format": "synthetic", "shape": [4], "count": 8}},
    "train": {}
  })");
}

inline job::JobConfig parse(const json& job, const std::vector<std::string>& overrides = {}) {
  return job::parse_job_config(job.dump(2), "job.json", overrides);
}

// The message of the ConfigError that parsing `text` throws.
inline std::string text_error(const std::string& text,
                              const std::vector<std::string>& overrides = {}) {
  try {
    job::parse_job_config(text, "job.json", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError for: " << text);
  return "";
}

inline std::string config_error(const json& job, const std::vector<std::string>& overrides = {}) {
  return text_error(job.dump(2), overrides);
}

}  // namespace dtrain::config::test
