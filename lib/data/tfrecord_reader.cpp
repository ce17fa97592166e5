// The TFRecord reader: files of tf.train.Example records (TensorFlow's
// TFRecordWriter, plain or gzip), one sample per record.
//
// Each record's `image_key` feature is the image, either raw bytes (uint8,
// spec.shape's element count, `rescale` applies) or a float_list of the same
// count (taken as is); its `label_key` feature is an int64_list with one label.
// spec.shape is the model's input_shape unless the source sets `shape` (job
// config fills it in). Files are read in order, record by record (tfrecord.h
// checks every CRC); records are parsed and decoded in chunks on
// data.num_parallel_calls threads. Any bad record is an IoError naming the file,
// the record, its offset, the feature and what was expected.
// Its registry entry (dataset.h's DataFormat: keys, reader, loaders) closes the file.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/host.h"
#include "core/strings.h"
#include "data/readers.h"
#include "data/tfrecord.h"
#include "proto/tf_example.pb.h"

namespace dtrain::data::detail {
namespace {

constexpr size_t kChunkRecords = 4096;  // records read, then decoded together

// What one record decodes to, or why it could not be.
struct Decoded {
  std::string error;  // empty when fine
  bool floats = false;
};

std::string feature_names(const tf::Example& ex) {
  std::vector<std::string> names;
  for (const auto& [name, feature] : ex.features().feature()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names.empty() ? std::string("no features") : join(names, ", ");
}

const char* kind_name(const tf::Feature& f) {
  switch (f.kind_case()) {
    case tf::Feature::kBytesList: return "a bytes_list";
    case tf::Feature::kFloatList: return "a float_list";
    case tf::Feature::kInt64List: return "an int64_list";
    default: return "an empty feature";
  }
}

// Decodes `record` into pixels (bytes) or values (floats) at `sample` and its label.
Decoded decode(const DataSourceSpec& spec, const std::string& record, int64_t numel, uint8_t* pixels, float* values,
               int32_t* label) {
  Decoded d;
  tf::Example ex;
  if (!ex.ParseFromString(record)) {
    d.error = "is not a tf.train.Example protocol buffer";
    return d;
  }
  const auto& features = ex.features().feature();
  const auto image = features.find(spec.image_key);
  if (image == features.end()) {
    d.error = str("has no feature '", spec.image_key, "' (it has: ", feature_names(ex),
                  "); set image_key to the image feature's name");
    return d;
  }
  const tf::Feature& img = image->second;
  if (img.kind_case() == tf::Feature::kBytesList) {
    const auto& list = img.bytes_list().value();
    const int64_t got = list.size() == 1 ? static_cast<int64_t>(list[0].size()) : -1;
    if (got != numel) {
      d.error = list.size() != 1
                    ? str("feature '", spec.image_key, "' holds ", list.size(), " byte strings; expected one of ", numel,
                          " raw bytes (the model's input_shape)")
                    : str("feature '", spec.image_key, "' holds ", got, " bytes; expected ", numel, " (",
                          shape_str(spec.shape), " as raw uint8; PNG/JPEG-encoded images are not read: store raw bytes)");
      return d;
    }
    if (pixels) std::memcpy(pixels, list[0].data(), static_cast<size_t>(numel));
  } else if (img.kind_case() == tf::Feature::kFloatList) {
    d.floats = true;
    const auto& list = img.float_list().value();
    if (list.size() != numel) {
      d.error = str("feature '", spec.image_key, "' holds ", list.size(), " floats; expected ", numel, " (",
                    shape_str(spec.shape), ")");
      return d;
    }
    if (values) std::memcpy(values, list.data(), static_cast<size_t>(numel) * sizeof(float));
  } else {
    d.error = str("feature '", spec.image_key, "' is ", kind_name(img),
                  "; expected a bytes_list (raw uint8 pixels) or a float_list");
    return d;
  }
  const auto lab = features.find(spec.label_key);
  if (lab == features.end()) {
    d.error = str("has no feature '", spec.label_key, "' (it has: ", feature_names(ex),
                  "); set label_key to the label feature's name");
    return d;
  }
  if (lab->second.kind_case() != tf::Feature::kInt64List || lab->second.int64_list().value_size() != 1) {
    d.error = str("feature '", spec.label_key, "' is ", kind_name(lab->second),
                  lab->second.kind_case() == tf::Feature::kInt64List
                      ? str(" of ", lab->second.int64_list().value_size(), " values")
                      : std::string(),
                  "; expected an int64_list with one class index");
    return d;
  }
  const int64_t value = lab->second.int64_list().value(0);
  if (value < 0 || value > INT32_MAX) {
    d.error = str("feature '", spec.label_key, "' is ", value, "; a class index must be >= 0");
    return d;
  }
  *label = static_cast<int32_t>(value);
  return d;
}

int decode_threads(const DataSourceSpec& spec) {
  if (spec.parallel_calls > 0) return static_cast<int>(spec.parallel_calls);
  return std::max(1, usable_cores());
}

void check_fields(const DataSourceSpec& spec) {
  if (spec.files.empty())
    throw ConfigError(str(spec.path, ".files: missing or empty: a tfrecord source needs its files or glob "
                                     "patterns, e.g. [\"data/train-*.tfrecord.gz\"]"));
  if (spec.shape.empty())
    throw ConfigError(str(spec.path, ".shape: unknown; set it, e.g. [28, 28, 1] (a job takes the model's input_shape)"));
}

// Opens files[f], checking its compression against spec.compression.
std::unique_ptr<TfRecordReader> open_file(const DataSourceSpec& spec, const std::vector<std::string>& files, size_t f) {
  auto reader = std::make_unique<TfRecordReader>(files[f], str(spec.path, ".files[", f, "]"));
  if (spec.compression == "none" && reader->compressed())
    throw IoError(str(spec.path, ".files[", f, "]: '", files[f], "' is gzip-compressed, but ", spec.path,
                      ".compression is \"none\"; set it to \"gzip\" or \"auto\""));
  if (spec.compression == "gzip" && !reader->compressed())
    throw IoError(str(spec.path, ".files[", f, "]: '", files[f], "' is not gzip-compressed, but ", spec.path,
                      ".compression is \"gzip\"; set it to \"none\" or \"auto\""));
  return reader;
}

}  // namespace

Dataset load_tfrecord(const DataSourceSpec& spec) {
  check_fields(spec);
  const std::vector<std::string> files = expand_files(spec);
  Dataset ds;
  ds.name = spec.path;
  ds.sample_shape = spec.shape;
  ds.rescale = static_cast<float>(spec.rescale);
  const int64_t numel = ds.sample_numel();
  const int threads = decode_threads(spec);
  int kind = -1;  // 0 bytes, 1 floats: the first record decides, the rest must agree
  int64_t kind_record = -1;
  std::string kind_file;
  std::vector<std::string> chunk;
  std::vector<std::pair<int64_t, uint64_t>> where;  // each record's number and offset, for errors
  for (size_t f = 0; f < files.size(); ++f) {
    auto reader = open_file(spec, files, f);
    bool more = true;
    while (more) {
      chunk.clear();
      where.clear();
      std::string record;
      while (chunk.size() < kChunkRecords && (more = reader->next(record))) {
        chunk.push_back(std::move(record));
        where.emplace_back(reader->record_index(), reader->record_offset());
      }
      if (chunk.empty()) break;
      const int64_t n = static_cast<int64_t>(chunk.size());
      if (kind < 0) {
        int32_t unused = 0;
        const Decoded first = decode(spec, chunk[0], numel, nullptr, nullptr, &unused);
        if (!first.error.empty())
          throw IoError(str(spec.path, ".files[", f, "]: '", files[f], "' ", reader->where(where[0].first, where[0].second),
                            " ", first.error));
        kind = first.floats ? 1 : 0;
        kind_record = 0;
        kind_file = files[f];
      }
      const size_t base = static_cast<size_t>(ds.count);
      if (kind == 0) ds.pixels.resize((base + static_cast<size_t>(n)) * static_cast<size_t>(numel));
      else ds.values.resize((base + static_cast<size_t>(n)) * static_cast<size_t>(numel));
      ds.labels.resize(base + static_cast<size_t>(n));
      std::vector<Decoded> results(static_cast<size_t>(n));
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const size_t at = (base + static_cast<size_t>(i)) * static_cast<size_t>(numel);
        results[i] = decode(spec, chunk[i], numel, kind == 0 ? ds.pixels.data() + at : nullptr,
                            kind == 1 ? ds.values.data() + at : nullptr, &ds.labels[base + static_cast<size_t>(i)]);
      }
      for (int64_t i = 0; i < n; ++i) {
        const Decoded& d = results[i];
        std::string error = d.error;
        if (error.empty() && d.floats != (kind == 1))
          error = str("feature '", spec.image_key, "' is ", d.floats ? "a float_list" : "a bytes_list", ", but record ",
                      kind_record, " of '", kind_file, "' had ", kind == 1 ? "a float_list" : "a bytes_list",
                      "; every record must store the image the same way");
        if (!error.empty())
          throw IoError(str(spec.path, ".files[", f, "]: '", files[f], "' ", reader->where(where[i].first, where[i].second),
                            " ", error));
      }
      ds.count += n;
    }
  }
  if (ds.count == 0)
    throw IoError(str(spec.path, ".files: ", files.size(), " file(s) but no records; check the files"));
  return ds;
}

DatasetInfo probe_tfrecord(const DataSourceSpec& spec) {
  check_fields(spec);
  const std::vector<std::string> files = expand_files(spec);
  DatasetInfo info;
  info.sample_shape = spec.shape;
  std::string record;
  for (size_t f = 0; f < files.size(); ++f) {
    auto reader = open_file(spec, files, f);
    while (reader->next(record)) ++info.count;
  }
  return info;
}

}  // namespace dtrain::data::detail

namespace dtrain::data {

// The registry entry (dataset.h): keys, reader, loaders.
const DataFormat& tfrecord_format() {
  static const DataFormat format{
      "tfrecord",
      "TFRecord files of tf.train.Example records (TensorFlow's TFRecordWriter), plain or gzip",
      {{"files", "paths or glob patterns, in order (required, e.g. `data/train-*.tfrecord.gz`)"},
       {"compression", "`auto` (by content), `none` or `gzip`"},
       {"image_key", "`image`: the feature holding the image (raw uint8 bytes or a float_list)"},
       {"label_key", "`label`: the feature holding the class (an int64_list)"},
       {"shape", "the image's shape (the model's input_shape)"},
       {"rescale", "1/255, a byte pixel's multiplier"}},
      [](config::Section& r, DataSourceSpec& spec) {
        spec.files = r.require("files", " (an array of TFRecord paths or glob patterns)").to_string_list();
        spec.compression = r.get_choice("compression", "auto", {"auto", "none", "gzip"}, "compression");
        spec.image_key = r.get_string("image_key", "image");
        spec.label_key = r.get_string("label_key", "label");
        if (const auto v = r.find("shape")) spec.shape = v->to_shape();
        spec.rescale = r.get_double("rescale", spec.rescale, config::kPositive);
      },
      detail::load_tfrecord, detail::probe_tfrecord, true, /*shape_from_model=*/true,
      /*auto_shards_by_file=*/true};
  return format;
}

}  // namespace dtrain::data
