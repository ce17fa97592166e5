// Feeds: the text of a checkpoint's manifest.json.
// Asserts: manifest_from_json() returns a manifest or throws a dtrain error with a
// printable message; a manifest it returns is written again by manifest_to_json()
// and manifest_summary_json() without error, and reads back the same.
// Mutated as JSON too (json_mutator.h): values of another type where one belongs.
#include "checkpoint/manifest.h"
#include "fuzz_support.h"
#include "json_mutator.h"

using namespace dtrain;

DTRAIN_FUZZ_JSON_MUTATOR()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  checkpoint::Manifest m;
  if (!fuzz::expect_clean([&] { m = checkpoint::manifest_from_json(text, "ckpt-1/manifest.json"); })) return 0;
  std::string written;
  if (!fuzz::expect_clean([&] {
        written = checkpoint::manifest_to_json(m);
        checkpoint::manifest_summary_json(m);
      }))
    fuzz::fuzz_fail("a manifest that was read cannot be written again", text);
  checkpoint::Manifest again;
  if (!fuzz::expect_clean([&] { again = checkpoint::manifest_from_json(written, "written"); }))
    fuzz::fuzz_fail("a manifest written again does not read back", written);
  if (checkpoint::manifest_to_json(again) != written) fuzz::fuzz_fail("a manifest changes when read back", written);
  return 0;
}
