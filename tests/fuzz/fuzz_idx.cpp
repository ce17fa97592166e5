// Feeds: an IDX images file and an IDX labels file (MNIST's format, plain or gzip)
// in one input: the first 2 bytes (little-endian) say how many of the remaining
// bytes belong to the images file (modulo their count); the rest is the labels file.
// Asserts: the readers' header checks (magic numbers, sizes against the file,
// truncation, trailing bytes, the images/labels count) end in a dataset or a dtrain
// error with a printable message; a dataset that loads agrees with the probe and
// gives every sample.
#include "data_fuzz_util.h"

using namespace dtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  const size_t split = rest.empty() ? 0 : (size_t{data[0]} | size_t{data[1]} << 8) % (rest.size() + 1);
  data::DataSourceSpec spec = fuzz::source_spec("idx");
  spec.images = fuzz::write_file("images-idx3-ubyte", std::string_view(rest).substr(0, split));
  spec.labels = fuzz::write_file("labels-idx1-ubyte", std::string_view(rest).substr(split));
  fuzz::load_and_check(spec);
  return 0;
}
