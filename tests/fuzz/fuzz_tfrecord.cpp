// Feeds: the bytes of a TFRecord file (plain or gzip), read as a tfrecord data
// source of 2x2x1 images ("image" and "label" features), cached and streamed.
// Asserts: the record framing (lengths, both CRCs, truncation, zlib) and the
// tf.train.Example decoding end in a dataset or a dtrain error with a printable
// message; a dataset that loads agrees with the probe and gives every sample.
// (fuzz_tf_example feeds one record's data in a correct frame.)
#include "data_fuzz_util.h"

using namespace dtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("input.tfrecord", {reinterpret_cast<const char*>(data), size});
  data::DataSourceSpec spec = fuzz::source_spec("tfrecord");
  spec.files = {path};
  spec.shape = {2, 2, 1};
  if (!fuzz::load_and_check(spec)) return 0;
  spec.stream = true;  // the same files again, streamed (data.cache false)
  fuzz::load_and_check(spec);
  return 0;
}
