// Token windows for language models, shared by the sources that make them (text:
// byte tokens; tfrecord with sequence_length: int64_list token ids; internal to
// lib/data).
//
// A source's tokens, in order, are one corpus. `validation_split` cuts it once:
// the training subset is the first part, the validation subset the last
// `validation_split` of the tokens, and no window crosses the cut. Sample i of a
// subset is the window of sequence_length + 1 tokens at i * stride: its first
// sequence_length tokens are the sample, the last sequence_length its labels
// (each position's next token). The Dataset holds the subset's tokens once
// (Dataset::corpus or token_ids) and reads samples and labels from the windows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/section.h"
#include "data/data_spec.h"
#include "data/dataset.h"

namespace dtrain::data::detail {

// What a source calls its tokens in docs and messages.
struct TokenUnit {
  const char* singular;  // "byte", "token"
  const char* plural;    // "bytes", "tokens"
  const char* more;      // how to get more of them: "more text", "more records"
};

// The window keys' docs for a format's registry entry, and their reader:
// sequence_length (required), stride, validation_split, subset.
std::vector<config::KeyDoc> window_key_docs(const TokenUnit& unit);
void read_window_keys(config::Section& r, DataSourceSpec& spec);

// ConfigError for a bad sequence_length, stride, validation_split or subset.
void check_window_fields(const DataSourceSpec& spec);

// The subset's tokens [begin, end) of a corpus of `total` (> 0) tokens and the
// number of its windows; a ConfigError naming sequence_length when the subset is
// shorter than one window.
struct WindowRange {
  int64_t begin = 0, end = 0, count = 0;
};
WindowRange window_range(const DataSourceSpec& spec, int64_t total, const TokenUnit& unit);

// The windows of `range` over a whole corpus, keeping only the tokens they cover.
Dataset windowed_dataset(const DataSourceSpec& spec, const WindowRange& range, std::vector<uint8_t> tokens);
Dataset windowed_dataset(const DataSourceSpec& spec, const WindowRange& range, std::vector<int32_t> tokens);
// What windowed_dataset() would hold, for probe_dataset().
DatasetInfo windowed_info(const DataSourceSpec& spec, const WindowRange& range);

}  // namespace dtrain::data::detail
