// The TFRecord reader: files of tf.train.Example records (TensorFlow's
// TFRecordWriter, plain or gzip), one sample per record.
//
// Each record's `image_key` feature is the image, either raw bytes (uint8,
// spec.shape's element count, `rescale` applies) or a float_list of the same
// count (taken as is); its `label_key` feature is an int64_list with one label.
// spec.shape is the model's input_shape unless the source sets `shape` (job
// config fills it in). Files are read in order, record by record (tfrecord.h
// checks every CRC); records are parsed and decoded in chunks on
// data.num_parallel_calls threads. With data.cache false the source streams:
// one pass reads the count and the labels, and each epoch reads the images again
// (SampleStream), so files larger than memory train. Any bad record is an IoError naming the file,
// the record, its offset, the feature and what was expected.
// With `sequence_length` the source reads token ids instead (tfrecord_tokens.cpp).
// Its registry entry (dataset.h's DataFormat: keys, reader, loaders) closes the file.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/host.h"
#include "core/strings.h"
#include "data/readers.h"
#include "data/tfrecord_examples.h"

namespace dtrain::data::detail {

void check_tfrecord_files(const DataSourceSpec& spec) {
  if (spec.files.empty())
    throw ConfigError(str(spec.path, ".files: missing or empty: a tfrecord source needs its files or glob "
                                     "patterns, e.g. [\"data/train-*.tfrecord.gz\"]"));
}

std::unique_ptr<TfRecordReader> open_tfrecord_file(const DataSourceSpec& spec, const std::vector<std::string>& files,
                                                   size_t f) {
  auto reader = std::make_unique<TfRecordReader>(files[f], str(spec.path, ".files[", f, "]"));
  if (spec.compression == "none" && reader->compressed())
    throw IoError(str(spec.path, ".files[", f, "]: '", files[f], "' is gzip-compressed, but ", spec.path,
                      ".compression is \"none\"; set it to \"gzip\" or \"auto\""));
  if (spec.compression == "gzip" && !reader->compressed())
    throw IoError(str(spec.path, ".files[", f, "]: '", files[f], "' is not gzip-compressed, but ", spec.path,
                      ".compression is \"gzip\"; set it to \"none\" or \"auto\""));
  return reader;
}

std::string feature_names(const tf::Example& ex) {
  std::vector<std::string> names;
  for (const auto& [name, feature] : ex.features().feature()) names.push_back(name);
  std::sort(names.begin(), names.end());
  // The names come from the file: escaped, cut short, and only the first few.
  constexpr size_t kShown = 10;
  const size_t count = names.size();
  if (count > kShown) names.resize(kShown);
  for (std::string& name : names) name = printable(name, 40);
  if (count > kShown) names.push_back(str("and ", count - kShown, " more"));
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

namespace {

constexpr size_t kChunkRecords = 4096;  // records read, then decoded together

// What one record decodes to, or why it could not be.
struct Decoded {
  std::string error;  // empty when fine
  bool floats = false;
};

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
    d.error = str("feature '", spec.label_key, "' is ", value, "; a class index must be 0 to ", INT32_MAX);
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
  check_tfrecord_files(spec);
  if (spec.shape.empty())
    throw ConfigError(str(spec.path, ".shape: unknown; set it, e.g. [28, 28, 1] (a job takes the model's input_shape)"));
}

// One chunk of records, decoded.
struct Chunk {
  int64_t n = 0;
  bool floats = false;          // float_list images (else raw bytes)
  std::vector<uint8_t> pixels;  // n * numel bytes (raw byte images)
  std::vector<float> values;    // n * numel floats (float_list images)
  std::vector<int32_t> labels;  // n
};

// The source's records in order, file after file, decoded a chunk of at most
// kChunkRecords records (of one file) at a time on the decode threads. Every
// record must store its image the same way as the source's first record.
class RecordDecoder {
 public:
  explicit RecordDecoder(const DataSourceSpec& spec)
      : spec_(spec), files_(expand_files(spec)), numel_(shape_numel(spec.shape)), threads_(decode_threads(spec)) {}
  const std::vector<std::string>& files() const { return files_; }

  // The next chunk into `out`; false when every file has been read.
  bool next_chunk(Chunk& out) {
    while (true) {
      if (!reader_) {
        if (file_ >= files_.size()) return false;
        reader_ = open_tfrecord_file(spec_, files_, file_);
      }
      records_.clear();
      where_.clear();
      std::string record;
      while (records_.size() < kChunkRecords && reader_->next(record)) {
        records_.push_back(std::move(record));
        where_.emplace_back(reader_->record_index(), reader_->record_offset());
      }
      if (!records_.empty()) break;
      reader_.reset();
      ++file_;
    }
    decode_chunk(out);
    return true;
  }

 private:
  [[noreturn]] void fail(size_t i, const std::string& error) const {
    throw IoError(str(spec_.path, ".files[", file_, "]: '", files_[file_], "' ",
                      reader_->where(where_[i].first, where_[i].second), " ", error));
  }

  void decode_chunk(Chunk& out) {
    const int64_t n = static_cast<int64_t>(records_.size());
    if (kind_ < 0) {
      int32_t unused = 0;
      const Decoded first = decode(spec_, records_[0], numel_, nullptr, nullptr, &unused);
      if (!first.error.empty()) fail(0, first.error);
      kind_ = first.floats ? 1 : 0;
      kind_file_ = files_[file_];
    }
    out.n = n;
    out.floats = kind_ == 1;
    const size_t elements = static_cast<size_t>(n) * static_cast<size_t>(numel_);
    out.pixels.resize(out.floats ? 0 : elements);
    out.values.resize(out.floats ? elements : 0);
    out.labels.resize(static_cast<size_t>(n));
    std::vector<Decoded> results(static_cast<size_t>(n));
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const size_t at = static_cast<size_t>(i) * static_cast<size_t>(numel_);
      results[i] = decode(spec_, records_[i], numel_, out.floats ? nullptr : out.pixels.data() + at,
                          out.floats ? out.values.data() + at : nullptr, &out.labels[static_cast<size_t>(i)]);
    }
    for (int64_t i = 0; i < n; ++i) {
      const Decoded& d = results[i];
      if (!d.error.empty()) fail(static_cast<size_t>(i), d.error);
      if (d.floats != out.floats)
        fail(static_cast<size_t>(i),
             str("feature '", spec_.image_key, "' is ", d.floats ? "a float_list" : "a bytes_list", ", but record 0 of '",
                 kind_file_, "' had ", out.floats ? "a float_list" : "a bytes_list",
                 "; every record must store the image the same way"));
    }
  }

  DataSourceSpec spec_;
  std::vector<std::string> files_;
  int64_t numel_;
  int threads_;
  size_t file_ = 0;
  std::unique_ptr<TfRecordReader> reader_;
  int kind_ = -1;  // 0 bytes, 1 floats: the first record decides
  std::string kind_file_;
  std::vector<std::string> records_;
  std::vector<std::pair<int64_t, uint64_t>> where_;  // each record's number and offset, for errors
};

// A streamed source's samples, read again from the files by each cursor.
class TfRecordCursor final : public SampleStream::Cursor {
 public:
  explicit TfRecordCursor(const DataSourceSpec& spec)
      : decoder_(spec), path_(spec.path), numel_(shape_numel(spec.shape)), rescale_(static_cast<float>(spec.rescale)) {}
  void next(float* out) override {
    if (at_ == chunk_.n) {
      if (!decoder_.next_chunk(chunk_))
        throw IoError(str(path_, ": the files hold fewer records than when training started; were they changed "
                                 "during training?"));
      at_ = 0;
    }
    const size_t begin = static_cast<size_t>(at_++) * static_cast<size_t>(numel_);
    if (chunk_.floats) {
      std::memcpy(out, chunk_.values.data() + begin, static_cast<size_t>(numel_) * sizeof(float));
      return;
    }
    const uint8_t* src = chunk_.pixels.data() + begin;  // the same arithmetic as Dataset::copy_sample
    for (int64_t j = 0; j < numel_; ++j) out[j] = static_cast<float>(src[j]) * rescale_;
  }

 private:
  RecordDecoder decoder_;
  std::string path_;
  int64_t numel_;
  float rescale_;
  Chunk chunk_;
  int64_t at_ = 0;
};

class TfRecordStream final : public SampleStream {
 public:
  explicit TfRecordStream(DataSourceSpec spec) : spec_(std::move(spec)) {}
  std::unique_ptr<Cursor> open() const override { return std::make_unique<TfRecordCursor>(spec_); }

 private:
  DataSourceSpec spec_;
};

// Every record of the source, checked: the count and labels, and the images too
// when `keep_images` (else they are read again by each epoch's cursor).
Dataset read_records(const DataSourceSpec& spec, bool keep_images) {
  check_fields(spec);
  Dataset ds;
  ds.name = spec.path;
  ds.sample_shape = spec.shape;
  ds.rescale = static_cast<float>(spec.rescale);
  RecordDecoder decoder(spec);
  Chunk chunk;
  while (decoder.next_chunk(chunk)) {
    if (keep_images && chunk.floats) ds.values.insert(ds.values.end(), chunk.values.begin(), chunk.values.end());
    if (keep_images && !chunk.floats) ds.pixels.insert(ds.pixels.end(), chunk.pixels.begin(), chunk.pixels.end());
    ds.labels.insert(ds.labels.end(), chunk.labels.begin(), chunk.labels.end());
    ds.count += chunk.n;
  }
  if (ds.count == 0)
    throw IoError(str(spec.path, ".files: ", decoder.files().size(), " file(s) but no records; check the files"));
  return ds;
}

}  // namespace

Dataset load_tfrecord(const DataSourceSpec& spec) {
  if (spec.token_windows()) return load_tfrecord_tokens(spec);
  return read_records(spec, /*keep_images=*/true);
}

Dataset stream_tfrecord(const DataSourceSpec& spec) {
  if (spec.token_windows()) return load_tfrecord_tokens(spec);  // held once, as a text source's bytes
  Dataset ds = read_records(spec, /*keep_images=*/false);
  ds.stream = std::make_shared<TfRecordStream>(spec);
  return ds;
}

DatasetInfo probe_tfrecord(const DataSourceSpec& spec) {
  if (spec.token_windows()) return probe_tfrecord_tokens(spec);
  check_fields(spec);
  const std::vector<std::string> files = expand_files(spec);
  DatasetInfo info;
  info.sample_shape = spec.shape;
  std::string record;
  for (size_t f = 0; f < files.size(); ++f) {
    auto reader = open_tfrecord_file(spec, files, f);
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
      "TFRecord files of tf.train.Example records (TensorFlow's TFRecordWriter), plain or gzip: an image and a "
      "label per record, or, with `sequence_length`, a tokeniser's ids in windows for a language model",
      [] {
        std::vector<config::KeyDoc> keys = {
            {"files", "paths or glob patterns, in order (required, e.g. `data/train-*.tfrecord.gz`)"},
            {"compression", "`auto` (by content), `none` or `gzip`"},
            {"image_key", "`image`: the feature holding the image (raw uint8 bytes or a float_list)"},
            {"label_key", "`label`: the feature holding the class (an int64_list)"},
            {"shape", "the image's shape (the model's input_shape)"},
            {"rescale", "1/255, a byte pixel's multiplier"}};
        for (const config::KeyDoc& key : detail::tfrecord_token_key_docs()) keys.push_back(key);
        return keys;
      }(),
      [](config::Section& r, DataSourceSpec& spec) {
        spec.files = r.require("files", " (an array of TFRecord paths or glob patterns)").to_string_list();
        spec.compression = r.get_choice("compression", "auto", {"auto", "none", "gzip"}, "compression");
        if (detail::read_tfrecord_token_keys(r, spec)) return;
        spec.image_key = r.get_string("image_key", "image");
        spec.label_key = r.get_string("label_key", "label");
        if (const auto v = r.find("shape")) spec.shape = v->to_shape();
        spec.rescale = r.get_double("rescale", spec.rescale, config::kPositive);
      },
      detail::load_tfrecord, detail::probe_tfrecord, true, /*shape_from_model=*/true,
      /*auto_shards_by_file=*/true, detail::stream_tfrecord};
  return format;
}

}  // namespace dtrain::data
