// Feeds: a job file's JSON text, then --set overrides, separated by NUL bytes
// ("{...}\0train.epochs=5\0model.layers[0].units=3").
// Asserts: parse_job_config() (the document, the overrides, and every section's
// reader: model, loss, optimizer, data, strategy, train, runtime, output,
// checkpoint, cluster) returns a job or throws a dtrain error with a printable
// message; a job that parses has a normalised JSON text that parses again, without
// the overrides, to the same text.
// Mutated as JSON too (json_mutator.h): values of another type where one belongs.
#include "fuzz_support.h"
#include "json_mutator.h"
#include "job/job_config.h"

using namespace dtrain;

DTRAIN_FUZZ_JSON_MUTATOR()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts = fuzz::split_input(data, size);
  const std::string text = parts.front();
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  job::JobConfig job;
  if (!fuzz::expect_clean([&] { job = job::parse_job_config(text, "job.json", overrides); })) return 0;
  job::JobConfig again;
  if (!fuzz::expect_clean([&] { again = job::parse_job_config(job.normalized_json, "normalized.json"); }))
    fuzz::fuzz_fail("a job's normalised JSON does not parse again", job.normalized_json);
  if (again.normalized_json != job.normalized_json)
    fuzz::fuzz_fail("a job's normalised JSON changes when parsed again", job.normalized_json);
  return 0;
}
