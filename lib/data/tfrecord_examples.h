// What the tfrecord source's two readers share (internal to lib/data): opening a
// source's file checked against its `compression`, and naming a tf.train.Example's
// features in messages. tfrecord_reader.cpp reads images and labels,
// tfrecord_tokens.cpp token ids in windows.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/data_spec.h"
#include "data/tfrecord.h"
#include "proto/tf_example.pb.h"

namespace dtrain::data::detail {

// ConfigError when spec.files is empty.
void check_tfrecord_files(const DataSourceSpec& spec);
// Opens files[f], checking its compression against spec.compression.
std::unique_ptr<TfRecordReader> open_tfrecord_file(const DataSourceSpec& spec, const std::vector<std::string>& files,
                                                   size_t f);

// "image, label": the record's feature names, sorted, escaped, the first few.
std::string feature_names(const tf::Example& ex);
// "a bytes_list", "a float_list", "an int64_list" or "an empty feature".
const char* kind_name(const tf::Feature& f);

}  // namespace dtrain::data::detail
