// Feeds: a text source's bytes after a 3-byte header that picks its keys
// (sequence_length 1..16, stride 0..7 (0: sequence_length), validation_split
// 0..0.9 with either subset), plain or gzip.
// Asserts: the reader's checks (UTF-8, NUL bytes, an empty or too short corpus
// or subset) end in a dataset or a dtrain error with a printable message; a
// dataset that loads agrees with the probe and gives every window and its labels.
#include "data_fuzz_util.h"

using namespace dtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  data::DataSourceSpec spec = fuzz::source_spec("text");
  spec.sequence_length = 1 + data[0] % 16;
  spec.stride = data[1] % 8;
  spec.validation_split = (data[2] % 10) / 10.0;
  if (spec.validation_split > 0) spec.subset = data[2] & 0x80 ? "validation" : "training";
  spec.files = {fuzz::write_file("corpus.txt", {reinterpret_cast<const char*>(data) + 3, size - 3})};
  fuzz::load_and_check(spec);
  return 0;
}
