// The CIFAR-10 binary reader: files of 3073-byte records, concatenated in order.
//
// A record is one label byte (0..9) followed by a 32x32 image as three planes
// (1024 red, 1024 green, then 1024 blue bytes, each plane row-major). dtrain keeps
// images channels-last, so each record is transposed to (32, 32, 3) as it is
// read. A file whose size is not a whole number of records, or a label above 9, is
// an IoError naming the file and its index in spec.files.
// Its registry entry (dataset.h's DataFormat: keys, reader, loaders) closes the file.
#include "core/error.h"
#include "core/strings.h"
#include "data/byte_file.h"
#include "data/readers.h"

namespace dtrain::data::detail {
namespace {

constexpr int64_t kSide = 32;
constexpr int64_t kPlane = kSide * kSide;             // 1024
constexpr int64_t kImageBytes = 3 * kPlane;           // 3072
constexpr int64_t kRecordBytes = 1 + kImageBytes;     // 3073
constexpr int kClasses = 10;
constexpr const char* kMissingHint =
    "fix the path; the files are those of the CIFAR-10 binary version "
    "(cifar-10-batches-bin/data_batch_1.bin ... test_batch.bin)";

void check_fields(const DataSourceSpec& spec) {
  if (spec.files.empty())
    throw ConfigError(str(spec.path, ".files: missing or empty: a cifar10 source needs the "
                                     "binary batch files, e.g. [\"data_batch_1.bin\"]"));
}

// Opens files[index] and returns its size in bytes (appending the data to *out when
// given), after checking that it is a whole, non-zero number of records.
uint64_t read_file(const DataSourceSpec& spec, size_t index, std::vector<uint8_t>* out) {
  ByteFile file(spec.files[index], str(spec.path, ".files[", index, "]"), kMissingHint);
  const ByteFile::Payload payload = file.read_payload(ByteFile::kToEnd, out);
  const uint64_t bytes = payload.got;
  if (bytes == 0) file.fail("is empty: a CIFAR-10 binary file holds 3073-byte records");
  if (bytes % kRecordBytes != 0)
    file.fail(str("has ", bytes, " bytes, which is not a whole number of 3073-byte CIFAR-10 "
                  "records (", bytes / kRecordBytes, " records and ", bytes % kRecordBytes,
                  " bytes): it is truncated, or not a CIFAR-10 binary file (the Python "
                  "version cannot be read; use the binary version)"));
  return bytes;
}

}  // namespace

Dataset load_cifar10(const DataSourceSpec& spec) {
  check_fields(spec);
  Dataset ds;
  ds.name = spec.path;
  ds.sample_shape = {kSide, kSide, 3};
  ds.rescale = static_cast<float>(spec.rescale);
  std::vector<uint8_t> raw;
  for (size_t f = 0; f < spec.files.size(); ++f) {
    raw.clear();
    const uint64_t bytes = read_file(spec, f, &raw);
    const int64_t records = static_cast<int64_t>(bytes / kRecordBytes);
    const size_t base = ds.pixels.size();
    ds.pixels.resize(base + static_cast<size_t>(records * kImageBytes));
    ds.labels.reserve(ds.labels.size() + static_cast<size_t>(records));
    for (int64_t r = 0; r < records; ++r) {
      const uint8_t* record = raw.data() + r * kRecordBytes;
      if (record[0] >= kClasses)
        throw IoError(str(spec.path, ".files[", f, "]: '", spec.files[f], "' record ", r,
                          " has the label ", int{record[0]}, "; CIFAR-10 labels are 0..9 (is it "
                          "a CIFAR-100 file? those are not supported)"));
      ds.labels.push_back(record[0]);
      // Planes (C, H, W) -> channels-last (H, W, C).
      const uint8_t* planes = record + 1;
      uint8_t* image = ds.pixels.data() + base + r * kImageBytes;
      for (int64_t p = 0; p < kPlane; ++p) {
        image[3 * p + 0] = planes[p];
        image[3 * p + 1] = planes[kPlane + p];
        image[3 * p + 2] = planes[2 * kPlane + p];
      }
    }
    ds.count += records;
  }
  return ds;
}

DatasetInfo probe_cifar10(const DataSourceSpec& spec) {
  check_fields(spec);
  DatasetInfo info;
  info.sample_shape = {kSide, kSide, 3};
  for (size_t f = 0; f < spec.files.size(); ++f)
    info.count += static_cast<int64_t>(read_file(spec, f, nullptr) / kRecordBytes);
  return info;
}

}  // namespace dtrain::data::detail

namespace dtrain::data {

// The registry entry (dataset.h): keys, reader, loaders.
const DataFormat& cifar10_format() {
  static const DataFormat format{
      "cifar10",
      "CIFAR-10 binary batches (3073-byte records), concatenated in order",
      {{"files", "the batch files (required, e.g. `data_batch_1.bin`)"}, {"rescale", "1/255, a pixel's multiplier"}},
      [](config::Section& r, DataSourceSpec& spec) {
        spec.files = r.require("files", " (an array of data_batch_*.bin files)").to_string_list();
        spec.rescale = r.get_double("rescale", spec.rescale, config::kPositive);
      },
      detail::load_cifar10, detail::probe_cifar10, true};
  return format;
}

}  // namespace dtrain::data
