// Feeds: the text of a Keras model file (what model.to_json() writes, as
// model.keras_json names it).
// Asserts: keras_json_to_model_json() returns a model section or throws a dtrain
// error with a printable message; a model section it returns is JSON that
// read_model_spec() reads or rejects with a dtrain error (never anything else).
// Mutated as JSON too (json_mutator.h): values of another type where one belongs.
#include "config/section.h"
#include "fuzz_support.h"
#include "json_mutator.h"
#include "nn/keras_model.h"
#include "nn/model_spec.h"

using namespace dtrain;

DTRAIN_FUZZ_JSON_MUTATOR()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string model;
  if (!fuzz::expect_clean([&] { model = nn::keras_json_to_model_json(text, "model.json"); })) return 0;
  fuzz::expect_clean([&] {
    const config::Document doc(model, "model.json (read as model.keras_json)");
    nn::read_model_spec(doc.root());
  });
  return 0;
}
