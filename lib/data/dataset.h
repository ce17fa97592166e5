// Datasets held in memory: the IDX (MNIST / Fashion-MNIST), CIFAR-10 binary,
// TFRecord, synthetic and text readers, and what they produce.
//
// Every reader loads the whole source into a Dataset. Samples are channels-last
// (H, W, C) float32 after scaling by `rescale`; byte images are kept as bytes until
// asked for (or decoded once, when the pipeline caches). A sample has one class
// label, or `label_width` of them (a text window: the next token at each of its
// positions); a token source (text, tfrecord tokens) keeps its tokens once and
// reads each sample and its labels from their window. Readers check what can be checked (magic numbers,
// header sizes against file sizes, image/label counts) and throw IoError naming
// the file and what is wrong, or ConfigError for bad specs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <functional>
#include <memory>

#include "data/data_spec.h"
#include "tensor/tensor.h"

namespace dtrain::data {

// A source read sample by sample each epoch instead of held in memory (tfrecord
// with data.cache false: files larger than memory). The count and the labels are
// read up front; the images each time an epoch reads them.
class SampleStream {
 public:
  virtual ~SampleStream() = default;
  // Reads from the first sample on, in the source's order.
  class Cursor {
   public:
    virtual ~Cursor() = default;
    // Writes the next sample's sample_numel floats, rescaled as copy_sample() would.
    virtual void next(float* out) = 0;
  };
  virtual std::unique_ptr<Cursor> open() const = 0;
};

struct Dataset {
  std::string name;          // the spec's JSON path, e.g. "data.train"
  Shape sample_shape;        // (H, W, C); IDX images get C = 1
  int64_t count = 0;         // number of samples
  std::vector<uint8_t> pixels;  // count * sample_numel bytes (idx, cifar10), or empty
  std::vector<float> values;    // count * sample_numel floats (synthetic, or decoded), or empty
  float rescale = 1.0f;         // applied to pixels when decoding
  int64_t label_width = 1;      // labels per sample: 1, or a sequence's T next tokens
  std::vector<int32_t> labels;  // count * label_width labels (sample-major), each >= 0; empty for a corpus
  int32_t max_label = -1;       // largest label
  int64_t max_label_index = -1; // the sample that has it (for error messages)
  // A token corpus read through windows (text, tfrecord tokens), instead of
  // pixels/values and labels: sample i is tokens [i * window_stride, + T) as floats
  // (T = sample_numel()), its labels tokens [i * window_stride + 1, + T)
  // (label_width = T). The tokens are held in one of two widths: bytes (text) in
  // `corpus`, or int32 ids (tfrecord's int64_list token ids) in `token_ids`.
  std::vector<uint8_t> corpus;
  std::vector<int32_t> token_ids;
  int64_t window_stride = 0;    // > 0: the samples are windows of the corpus
  // Where corpus token p came from, for errors ("data.train.files[0]: 'a.tfrecord'
  // record 3 (byte offset 120), token 7 of 'input_ids'"); unset when the source
  // cannot say.
  std::function<std::string(int64_t p)> token_origin;
  // Set for a streamed source: the samples are read in order from here (pixels and
  // values stay empty; copy_sample() cannot be used, the pipeline reads the stream).
  std::shared_ptr<const SampleStream> stream;

  int64_t sample_numel() const;
  bool windowed() const { return window_stride > 0; }
  // A windowed corpus' tokens, whichever width holds them.
  int64_t corpus_size() const;
  int32_t corpus_token(int64_t p) const;
  // A windowed corpus' largest token id among the samples' tokens (labels false:
  // the model's input ids) or among their labels, and its first position in the
  // corpus and a sample that holds it; id -1 for no windows.
  struct TokenAt {
    int32_t id = -1;
    int64_t position = -1, sample = -1;
  };
  TokenAt largest_token(bool labels) const;
  // Writes sample i (sample_numel floats) to out.
  void copy_sample(int64_t i, float* out) const;
  // Writes sample i's label_width labels to out.
  void copy_labels(int64_t i, int32_t* out) const;
  // Decodes all pixels into `values` once (and frees `pixels`). A windowed corpus
  // stays as it is: its samples overlap, and a byte is as quick to read as a float.
  void decode_all();
};

// What a source holds, read from headers only (no full read): for `dtrain validate`.
struct DatasetInfo {
  Shape sample_shape;
  int64_t count = 0;
  int64_t label_width = 1;  // labels per sample
};

// The data-format registry: each `format` of a source, its keys and reader, and
// how to load it. Adding a format: a reader file with a function returning its
// entry, and one DT_DATA_FORMAT line in formats.inc.
struct DataFormat {
  std::string name;                  // "idx"
  std::string doc;                   // one line for the README's table
  std::vector<config::KeyDoc> keys;  // beyond "format" and "take"
  std::function<void(config::Section& r, DataSourceSpec& spec)> read;  // its keys into spec
  std::function<Dataset(const DataSourceSpec&)> load;      // the whole source (take not applied yet)
  std::function<DatasetInfo(const DataSourceSpec&)> probe;  // from headers only
  bool rescales = true;  // byte pixels scaled by `rescale`
  bool shape_from_model = false;  // the sample shape is the model's input_shape unless `shape` is set
  bool auto_shards_by_file = false;  // shard_policy auto means file (enough files) rather than data
  // A Dataset whose samples stream (spec.stream); nullptr: the format always loads.
  std::function<Dataset(const DataSourceSpec&)> stream = nullptr;
};
const std::vector<const DataFormat*>& data_formats();
// The entry named `name`; ConfigError listing the valid names otherwise.
const DataFormat& data_format(const std::string& name);

DatasetInfo probe_dataset(const DataSourceSpec& spec);

// Reads the whole source. Applies spec.take (first N samples).
Dataset load_dataset(const DataSourceSpec& spec);

// spec.files with glob patterns (`*`, `?`, `[...]`) replaced by the files they
// match, sorted; a pattern matching nothing is an IoError naming it. Names
// without a pattern stay as they are (their readers report a missing file).
std::vector<std::string> expand_files(const DataSourceSpec& spec);

}  // namespace dtrain::data
