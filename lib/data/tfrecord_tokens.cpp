// The tfrecord source's token windows (`format: tfrecord` with `sequence_length`):
// tf.train.Example records of a tokeniser's ids, as TensorFlow users keep
// tokenised text, read for a language model.
//
// Each record's `tokens_key` feature (`input_ids` by default, the name Hugging
// Face tokenisers and keras_hub preprocessors give it) is an int64_list of token
// ids. The files are read in order, record by record, and the records' ids are
// concatenated into one corpus, as Keras users pack tokenised text: a record may
// be of any length (no record is too short, none is padded), and nothing is put
// between two records (a tokeniser's end-of-text id, where wanted, belongs at the
// end of each record). The corpus is cut into windows as a text source's bytes
// are (windows.h: sequence_length, stride, validation_split, subset) and held
// once as int32 ids. A record that is not a tf.train.Example, lacks the feature,
// holds another kind of list, or an id below 0 or above 2^24 - 1 (ids reach the
// model as float32, exact up to 2^24) is an IoError naming the file, the record,
// its offset and the id's position. Each token's record is kept
// (Dataset::token_origin), so an id outside the model's vocabulary is reported
// where it came from (the trainer's load_checked).
#include <algorithm>
#include <memory>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "data/readers.h"
#include "data/tfrecord_examples.h"
#include "data/windows.h"

namespace dtrain::data::detail {
namespace {

constexpr TokenUnit kTokens{"token", "tokens", "more records"};
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// Where each record's tokens begin in the corpus, to name a token's record.
class TokenOrigins {
 public:
  TokenOrigins(std::string path, std::string key) : path_(std::move(path)), key_(std::move(key)) {}
  void add_file(std::string name, bool compressed) { files_.push_back({std::move(name), compressed}); }
  // A record of the last file added, holding tokens from `begin` on (at least one).
  void add_record(int64_t begin, int64_t record, uint64_t offset) {
    records_.push_back({begin, files_.size() - 1, record, offset});
  }
  // "data.train.files[0]: 'a.tfrecord' record 3 (byte offset 120), token 7 of 'input_ids'"
  std::string describe(int64_t position) const {
    const auto after = std::upper_bound(records_.begin(), records_.end(), position,
                                        [](int64_t p, const Record& r) { return p < r.begin; });
    DT_CHECK(after != records_.begin(), "token ", position, " of ", path_, " has no record");
    const Record& r = *std::prev(after);
    const File& f = files_[r.file];
    return str(path_, ".files[", r.file, "]: '", f.name, "' ", describe_record(r.record, r.offset, f.compressed),
               ", token ", position - r.begin, " of '", key_, "'");
  }

 private:
  struct File {
    std::string name;
    bool compressed;
  };
  struct Record {
    int64_t begin;
    size_t file;
    int64_t record;
    uint64_t offset;
  };
  std::string path_, key_;
  std::vector<File> files_;
  std::vector<Record> records_;
};

void check_fields(const DataSourceSpec& spec) {
  check_tfrecord_files(spec);
  if (spec.tokens_key.empty())
    throw ConfigError(str(spec.path, ".tokens_key: empty; name the feature holding the token ids, e.g. \"input_ids\""));
  check_window_fields(spec);
}

// Appends the token ids of `record` to *ids (when given) and counts them in *count;
// returns why the record holds none ("" when it does).
std::string append_ids(const DataSourceSpec& spec, const std::string& record, tf::Example& ex,
                       std::vector<int32_t>* ids, int64_t* count) {
  if (!ex.ParseFromString(record)) return "is not a tf.train.Example protocol buffer";
  const auto& features = ex.features().feature();
  const auto feature = features.find(spec.tokens_key);
  if (feature == features.end())
    return str("has no feature '", spec.tokens_key, "' (it has: ", feature_names(ex),
               "); set tokens_key to the feature holding the token ids");
  if (feature->second.kind_case() != tf::Feature::kInt64List)
    return str("feature '", spec.tokens_key, "' is ", kind_name(feature->second),
               "; expected an int64_list of token ids (a tokeniser's ids, tf.train.Int64List)");
  const auto& values = feature->second.int64_list().value();
  for (int i = 0; i < values.size(); ++i)
    if (values[i] < 0 || values[i] > kMaxTokenId)
      return str("feature '", spec.tokens_key, "' holds token id ", values[i], " at position ", i,
                 "; token ids must be 0 to ", kMaxTokenId, " (they reach the model as float32, exact up to 2^24)");
  if (ids)
    for (const int64_t id : values) ids->push_back(static_cast<int32_t>(id));
  *count += values.size();
  return {};
}

// Reads every record's ids in order, checked, into *ids (when given) and where each
// record's ids begin into *origins (when given); returns how many there are (> 0).
int64_t read_token_ids(const DataSourceSpec& spec, std::vector<int32_t>* ids, TokenOrigins* origins) {
  const std::vector<std::string> files = expand_files(spec);
  int64_t count = 0, records = 0;
  std::string record;
  tf::Example ex;
  for (size_t f = 0; f < files.size(); ++f) {
    auto reader = open_tfrecord_file(spec, files, f);
    if (origins) origins->add_file(files[f], reader->compressed());
    while (reader->next(record)) {
      ++records;
      const int64_t begin = count;
      const std::string error = append_ids(spec, record, ex, ids, &count);
      if (!error.empty())
        throw IoError(str(spec.path, ".files[", f, "]: '", files[f], "' ", reader->where(), " ", error));
      if (origins && count > begin) origins->add_record(begin, reader->record_index(), reader->record_offset());
    }
  }
  if (records == 0)
    throw IoError(str(spec.path, ".files: ", files.size(), " file(s) but no records; check the files"));
  if (count == 0)
    throw IoError(str(spec.path, ".files: the ", records, " record(s) hold no token ids (every '", spec.tokens_key,
                      "' is empty); check the files and tokens_key"));
  return count;
}

}  // namespace

Dataset load_tfrecord_tokens(const DataSourceSpec& spec) {
  check_fields(spec);
  std::vector<int32_t> ids;
  auto origins = std::make_shared<TokenOrigins>(spec.path, spec.tokens_key);
  const int64_t total = read_token_ids(spec, &ids, origins.get());
  const WindowRange range = window_range(spec, total, kTokens);
  Dataset ds = windowed_dataset(spec, range, std::move(ids));
  ds.token_origin = [origins, begin = range.begin](int64_t p) { return origins->describe(begin + p); };
  return ds;
}

DatasetInfo probe_tfrecord_tokens(const DataSourceSpec& spec) {
  check_fields(spec);
  return windowed_info(spec, window_range(spec, read_token_ids(spec, nullptr, nullptr), kTokens));
}

std::vector<config::KeyDoc> tfrecord_token_key_docs() {
  std::vector<config::KeyDoc> keys = {
      {"tokens_key", "`input_ids`: with sequence_length, the feature holding a record's token ids (an int64_list)"}};
  for (config::KeyDoc key : window_key_docs(kTokens)) {
    if (key.name == "sequence_length")
      key.doc = "token windows instead of images: every record's token ids, concatenated in order, cut into "
                "windows as a `text` source's bytes; a sample is `sequence_length` tokens, its labels the next "
                "token at each position (>= 1)";
    keys.push_back(std::move(key));
  }
  return keys;
}

bool read_tfrecord_token_keys(config::Section& r, DataSourceSpec& spec) {
  const auto refuse = [&r](std::initializer_list<const char*> keys, const std::string& why) {
    for (const char* key : keys)
      if (r.find(key)) r.fail(key, why);
  };
  if (!r.find("sequence_length")) {
    refuse({"tokens_key", "stride", "validation_split", "subset"},
           "a key of token windows, but this source reads images; set sequence_length (tokens per sample) to "
           "read token ids, or drop this key");
    return false;
  }
  refuse({"image_key", "label_key", "shape", "rescale"},
         "a key of image records, but this source reads token ids (sequence_length is set); drop this key, or "
         "sequence_length to read images");
  spec.tokens_key = r.get_string("tokens_key", "input_ids");
  read_window_keys(r, spec);
  return true;
}

}  // namespace dtrain::data::detail
