// The per-format readers behind load_dataset() and probe_dataset() (internal to
// lib/data).
//
// Each reader checks its spec fields (ConfigError) and its files (IoError) and
// fills the whole Dataset except what dataset.cpp does for every format: applying
// `take` and finding the largest label.
#pragma once

#include "data/data_spec.h"
#include "data/dataset.h"

namespace dtrain::data::detail {

// IDX (MNIST / Fashion-MNIST): spec.images and spec.labels, plain or gzip.
Dataset load_idx(const DataSourceSpec& spec);
DatasetInfo probe_idx(const DataSourceSpec& spec);

// CIFAR-10 binary: spec.files, 3073-byte records, concatenated in order.
Dataset load_cifar10(const DataSourceSpec& spec);
DatasetInfo probe_cifar10(const DataSourceSpec& spec);

// TFRecord files of tf.train.Example records: spec.files (globs expanded), in order.
Dataset load_tfrecord(const DataSourceSpec& spec);
// The same source streamed: the count and labels now, the images through ds.stream.
Dataset stream_tfrecord(const DataSourceSpec& spec);
DatasetInfo probe_tfrecord(const DataSourceSpec& spec);
// The same format with sequence_length: each record's int64_list of token ids
// (spec.tokens_key), concatenated in order, in windows (windows.h).
Dataset load_tfrecord_tokens(const DataSourceSpec& spec);
DatasetInfo probe_tfrecord_tokens(const DataSourceSpec& spec);
// Its keys' docs (tokens_key and the window keys), and their reader: true when
// the source has sequence_length (it reads tokens; the image keys are refused),
// false when it reads images (the token keys are refused).
std::vector<config::KeyDoc> tfrecord_token_key_docs();
bool read_tfrecord_token_keys(config::Section& r, DataSourceSpec& spec);

// Synthetic class prototypes plus noise: spec.shape, classes, count, seed.
Dataset load_synthetic(const DataSourceSpec& spec);
DatasetInfo probe_synthetic(const DataSourceSpec& spec);

// Text files as byte tokens in windows: spec.files (globs expanded, less spec.exclude),
// spec.sequence_length, stride, validation_split and subset.
Dataset load_text(const DataSourceSpec& spec);
DatasetInfo probe_text(const DataSourceSpec& spec);

}  // namespace dtrain::data::detail
