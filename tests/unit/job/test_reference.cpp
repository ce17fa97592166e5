// The reference tables of docs/config-reference.md are the registries' own text:
// the block between the markers must be exactly what `dtrain reference` prints
// (regenerate it with `build/dtrain reference` when a registry entry changes).
// And the unknown-key notes come from the entries' keys: a key of another entry
// names its owner.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/dataset.h"
#include "job/job_config.h"
#include "job/reference.h"
#include "nn/layer_registry.h"
#include "optim/optimizer.h"

using namespace dtrain;

TEST_CASE("docs/config-reference.md holds the reference tables the registries write") {
  std::ifstream in(DTRAIN_SOURCE_DIR "/docs/config-reference.md");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t begin = doc.find(job::kReferenceBegin);
  const size_t end = doc.find(job::kReferenceEnd);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  const std::string block = doc.substr(begin, end + std::string(job::kReferenceEnd).size() + 1 - begin);
  CHECK(block == job::reference_markdown());
}

TEST_CASE("a key that belongs to another entry is reported with its owner") {
  const auto error = [](const std::string& text) {
    try {
      job::parse_job_config(text, "job.json");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string base_data = R"("data": {"train": {"format": "synthetic", "shape": [4], "count": 8}}, "train": {})";
  CHECK_THAT(error(R"({"model": {"input_shape": [4], "layers": [{"type": "Flatten", "units": 3}]},
                      "loss": "mse", "optimizer": "sgd", )" + base_data + "}"),
             Catch::Contains("'units' belongs to Dense layers"));
  CHECK_THAT(error(R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 3}]},
                      "loss": "mse", "optimizer": {"type": "adam", "momentum": 0.9}, )" + base_data + "}"),
             Catch::Contains("'momentum' belongs to sgd and rmsprop optimizers"));
  CHECK_THAT(error(R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 3}]},
                      "loss": "mse", "optimizer": "sgd",
                      "data": {"train": {"format": "synthetic", "shape": [4], "count": 8, "files": ["a"]}},
                      "train": {}})"),
             Catch::Contains("'files' belongs to cifar10, tfrecord and text sources"));
}

TEST_CASE("every registry has entries and unique names") {
  std::set<std::string> layers;
  for (const nn::LayerType* t : nn::layer_types()) CHECK(layers.insert(t->name).second);
  CHECK(layers.size() >= 10);
  std::set<std::string> formats;
  for (const data::DataFormat* f : data::data_formats()) CHECK(formats.insert(f->name).second);
  CHECK(formats.count("idx"));
  std::set<std::string> optimizers;
  for (const optim::OptimizerType& t : optim::optimizer_types()) CHECK(optimizers.insert(t.name).second);
  CHECK(optimizers.count("adamw"));
}
