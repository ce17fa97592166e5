// Feeds: the data of TFRecord records (tf.train.Example protocol buffers), split
// at the byte string "\xff\xfeREC" into up to 4 records that are written in correct
// frames (lengths and CRCs), then read as a tfrecord data source of 2x2x1 images
// with the features "image" and "label".
// Asserts: decoding ends in a dataset or a dtrain error with a printable message
// (feature names from the file are quoted escaped); a dataset that loads agrees
// with the probe and gives every sample.
#include <string_view>

#include "data/tfrecord.h"
#include "data_fuzz_util.h"

using namespace dtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string path = fuzz::work_dir() + "/input.tfrecord";
  {
    data::TfRecordWriter writer(path, "the fuzz input");
    size_t start = 0;
    for (int record = 0; record < 4; ++record) {
      const size_t cut = record == 3 ? std::string_view::npos : input.find("\xff\xfeREC", start);
      writer.write(std::string(input.substr(start, cut == std::string_view::npos ? cut : cut - start)));
      if (cut == std::string_view::npos) break;
      start = cut + 5;
    }
    writer.close();
  }
  data::DataSourceSpec spec = fuzz::source_spec("tfrecord");
  spec.files = {path};
  spec.shape = {2, 2, 1};
  fuzz::load_and_check(spec);
  return 0;
}
