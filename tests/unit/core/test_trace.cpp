// The trace recorder: spans written in the Chrome trace format, on the reference
// clock when an offset to it was set.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/trace.h"
#include "support/temp_dir.h"

using namespace dtrain;

TEST_CASE("written spans are shifted onto the reference clock by the offset") {
  trace::enable();
  trace::complete("probe span", "test", 1'000'000, 250);
  trace::set_clock_offset({-400, 35});
  test::TempDir dir;
  const std::string path = dir.file("trace.json");
  trace::write(path, "worker:1", 2);
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  bool found_span = false, found_offset = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["name"] == "probe span") {
      found_span = true;
      CHECK(e["ph"] == "X");
      CHECK(e["ts"] == 999'600);
      CHECK(e["dur"] == 250);
      CHECK(e["pid"] == 2);
    }
    if (e["name"] == "clock_offset_us") {
      found_offset = true;
      CHECK(e["args"]["offset_us"] == -400);
      CHECK(e["args"]["uncertainty_us"] == 35);
    }
  }
  CHECK(found_span);
  CHECK(found_offset);
  trace::set_clock_offset({});
}
