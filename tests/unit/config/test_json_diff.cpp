// config::json_differences: the key paths where two job configs differ, with both
// values, as the rendezvous reports a disagreement between tasks.
#include <catch2/catch.hpp>

#include "config/json_diff.h"

using dtrain::config::json_differences;

TEST_CASE("json_differences names each differing key path with both values") {
  const std::string a = R"({"train": {"epochs": 2, "seed": 1}, "model": {"layers": [{"units": 8}, {"units": 10}]}})";
  const std::string b = R"({"train": {"epochs": 3, "seed": 1, "extra": true}, "model": {"layers": [{"units": 8}, {"units": 12}]}})";
  const auto d = json_differences(a, b);
  REQUIRE(d.size() == 3);
  CHECK(d[0].path == "model.layers[1].units");
  CHECK(d[0].left == "10");
  CHECK(d[0].right == "12");
  CHECK(d[1].path == "train.epochs");
  CHECK(d[2].path == "train.extra");
  CHECK(d[2].left == "(absent)");
  CHECK(d[2].right == "true");
  CHECK(json_differences(a, a).empty());
}

TEST_CASE("json_differences: arrays of other lengths, non-JSON and the limit") {
  const auto whole = json_differences(R"({"l": [1, 2]})", R"({"l": [1, 2, 3]})");
  REQUIRE(whole.size() == 1);
  CHECK(whole[0].path == "l");
  CHECK(whole[0].right == "[1,2,3]");
  const auto text = json_differences("not json", "{}");
  REQUIRE(text.size() == 1);
  CHECK(text[0].path.empty());
  CHECK(json_differences(R"({"a":1,"b":2,"c":3})", R"({"a":0,"b":0,"c":0})", 2).size() == 2);
}
