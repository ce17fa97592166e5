// DataSpec and DataSourceSpec: the typed `data` section of a job, read through the
// data-format registry (dataset.h's DataFormat: one entry per reader, in the
// reader's own file, listed in formats.inc). `path` names each source in errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/section.h"

namespace dtrain::data {

struct DataFormat;  // dataset.h

// One data source (data.train, data.test or data.validation).
struct DataSourceSpec {
  std::string path;                   // "data.train"
  const DataFormat* format = nullptr; // idx | cifar10 | tfrecord | synthetic | text (dataset.h's registry)
  std::string images;             // idx: images file (.gz or plain)
  std::string labels;             // idx: labels file
  std::vector<std::string> files; // cifar10: binary batch files; tfrecord, text: paths or glob patterns
  std::vector<std::string> exclude;  // text: glob patterns of file names left out of what `files` matched
  std::vector<int64_t> shape;     // synthetic, tfrecord: sample shape, e.g. [28, 28, 1]
  std::string compression = "auto";  // tfrecord: auto | none | gzip
  std::string image_key = "image";   // tfrecord: the tf.train.Example feature holding the image
  std::string label_key = "label";   // tfrecord: ... and the one holding the label
  std::string tokens_key = "input_ids";  // tfrecord with sequence_length: the int64_list of token ids
  int64_t parallel_calls = 0;        // threads decoding records (data.num_parallel_calls; 0 = the cores)
  bool stream = false;               // read the samples from the files every epoch (data.cache false, tfrecord)
  int64_t classes = 10;           // synthetic: number of classes
  int64_t count = 0;              // synthetic: number of samples
  uint64_t seed = 0;              // synthetic: generator seed
  double rescale = 1.0 / 255.0;   // idx, cifar10: pixel value multiplier
  int64_t sequence_length = 0;    // text, tfrecord tokens: tokens per sample (and labels per sample)
  int64_t stride = 0;             // text, tfrecord tokens: tokens between windows (0 = sequence_length)
  double validation_split = 0.0;  // text, tfrecord tokens: the fraction of the corpus held out at its end
  std::string subset;             // text, tfrecord tokens: "training" or "validation" ("" without a split)
  int64_t take = 0;               // use only the first N samples (0 = all)

  // A source of token windows for a language model (text; tfrecord with
  // sequence_length): its samples are windows of one corpus (data/windows.h).
  bool token_windows() const { return sequence_length > 0; }
};

// data.shard_policy, TF's AutoShardPolicy: how the training tasks split the data.
enum class ShardPolicy { kAuto, kData, kFile, kOff };

struct DataSpec {
  std::string path = "data";
  DataSourceSpec train;
  bool has_test = false;
  DataSourceSpec test;
  // What an evaluator task evaluates checkpoints on, instead of data.test.
  bool has_validation = false;
  DataSourceSpec validation;
  int64_t shuffle_buffer = 10000;  // 0 or 1 = no shuffle
  // Batches prepared ahead on a background thread (0 = none); unset: "auto", 2
  // when a core is free for that thread, else 0 (the execution plan: plan/plan_parts.h).
  std::optional<int64_t> prefetch;
  bool drop_remainder = false;     // drop the last, smaller training batch
  bool cache = true;               // keep decoded float samples in memory after the first epoch
  ShardPolicy shard_policy = ShardPolicy::kAuto;
  int64_t num_parallel_calls = 0;  // threads decoding records (0 = the usable cores)
};

// Reads the data section: train (required) and test sources, each through its
// format's entry, and the pipeline keys.
DataSpec read_data_spec(const config::Value& value);
// Gives every source whose format takes its shape from the model (tfrecord) and
// sets none `input_shape`.
void use_model_input_shape(DataSpec& data, const std::vector<int64_t>& input_shape);
DataSourceSpec read_source_spec(const config::Value& value);

}  // namespace dtrain::data
