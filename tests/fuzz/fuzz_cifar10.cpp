// Feeds: the bytes of a CIFAR-10 binary batch file (3073-byte records: a label
// byte, then 32x32x3 planes), plain or gzip, read twice as one source's two files.
// Asserts: the reader's checks (whole records, labels 0..9, empty files, zlib)
// end in a dataset or a dtrain error with a printable message; a dataset that
// loads agrees with the probe and gives every sample.
#include "data_fuzz_util.h"

using namespace dtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  data::DataSourceSpec spec = fuzz::source_spec("cifar10");
  const std::string path = fuzz::write_file("data_batch_1.bin", {reinterpret_cast<const char*>(data), size});
  spec.files = {path, path};
  fuzz::load_and_check(spec);
  return 0;
}
