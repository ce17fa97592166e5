// Implementation of windows.h: the window keys, their checks, the subset's range
// of a corpus and the windowed Dataset, for the text and tfrecord token sources.
#include "data/windows.h"

#include <utility>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::data::detail {
namespace {

constexpr int64_t kMaxLength = int64_t{1} << 30;  // sequence_length and stride: no overflow in window arithmetic

int64_t stride_of(const DataSourceSpec& spec) { return spec.stride > 0 ? spec.stride : spec.sequence_length; }

template <class Token>
Dataset make_windowed(const DataSourceSpec& spec, const WindowRange& range, std::vector<Token> tokens,
                      std::vector<Token> Dataset::*storage) {
  Dataset ds;
  ds.name = spec.path;
  ds.sample_shape = {spec.sequence_length};
  ds.count = range.count;
  ds.rescale = 1.0f;
  ds.label_width = spec.sequence_length;
  ds.window_stride = stride_of(spec);
  // Only the tokens this subset's windows cover.
  const int64_t used = (range.count - 1) * ds.window_stride + spec.sequence_length + 1;
  if (range.begin == 0 && used == static_cast<int64_t>(tokens.size())) {
    ds.*storage = std::move(tokens);
  } else {
    (ds.*storage).assign(tokens.begin() + range.begin, tokens.begin() + range.begin + used);
  }
  return ds;
}

}  // namespace

std::vector<config::KeyDoc> window_key_docs(const TokenUnit& unit) {
  return {{"sequence_length", str("tokens per sample (required, >= 1); a sample's window is one ", unit.singular,
                                  " longer")},
          {"stride", str("sequence_length: ", unit.plural, " between the starts of two windows (>= 1)")},
          {"validation_split", "0: the fraction of the corpus, at its end, held out for validation, in [0, 1)"},
          {"subset", "`training` (the first part) or `validation` (the held-out end); required when "
                     "validation_split > 0"}};
}

void read_window_keys(config::Section& r, DataSourceSpec& spec) {
  spec.sequence_length = r.require_int("sequence_length", 1);
  spec.stride = r.get_int("stride", 0, 1);
  spec.validation_split = r.get_double("validation_split", 0.0, config::kFraction);
  spec.subset = r.get_choice("subset", "", {"training", "validation"}, "subset");
}

void check_window_fields(const DataSourceSpec& spec) {
  if (spec.sequence_length < 1)
    throw ConfigError(str(spec.path, ".sequence_length: must be >= 1, got ", spec.sequence_length,
                          " (the tokens of one sample; its labels are the next token at each position)"));
  if (spec.sequence_length > kMaxLength)
    throw ConfigError(str(spec.path, ".sequence_length: ", spec.sequence_length, " is too large (at most ", kMaxLength,
                          ")"));
  if (spec.stride < 0 || spec.stride > kMaxLength)
    throw ConfigError(str(spec.path, ".stride: must be in [1, ", kMaxLength, "], got ", spec.stride));
  if (!(spec.validation_split >= 0.0 && spec.validation_split < 1.0))
    throw ConfigError(str(spec.path, ".validation_split: must be in [0, 1), got ", spec.validation_split));
  if (spec.validation_split > 0.0 && spec.subset.empty())
    throw ConfigError(str(spec.path, ".subset: missing: with validation_split ", spec.validation_split,
                          " say which part of the corpus this source is, \"training\" or \"validation\""));
  if (spec.validation_split == 0.0 && !spec.subset.empty())
    throw ConfigError(str(spec.path, ".subset: \"", spec.subset, "\" needs validation_split > 0 (the fraction of "
                          "the corpus held out for validation); set it, or drop subset"));
  if (!spec.subset.empty() && spec.subset != "training" && spec.subset != "validation")
    throw ConfigError(str(spec.path, ".subset: must be \"training\" or \"validation\", got \"", spec.subset, "\""));
}

WindowRange window_range(const DataSourceSpec& spec, int64_t total, const TokenUnit& unit) {
  const auto held_out = static_cast<int64_t>(spec.validation_split * static_cast<double>(total));
  const bool validation = spec.subset == "validation";
  WindowRange range;
  range.begin = validation ? total - held_out : 0;
  range.end = validation ? total : total - held_out;
  const int64_t window = spec.sequence_length + 1;
  const int64_t length = range.end - range.begin;
  if (length < window)
    throw ConfigError(str(spec.path, ".sequence_length: ", spec.sequence_length, " needs windows of ", window, " ",
                          unit.plural, " (the tokens and the next one), but ",
                          spec.subset.empty() ? std::string("the corpus") : str("the ", spec.subset, " subset"),
                          " has ", length, " ", unit.plural, spec.subset.empty() ? "" : str(" (of ", total, ")"),
                          "; use a shorter sequence_length",
                          spec.validation_split > 0 ? ", another validation_split" : "", " or ", unit.more));
  range.count = (length - window) / stride_of(spec) + 1;
  return range;
}

Dataset windowed_dataset(const DataSourceSpec& spec, const WindowRange& range, std::vector<uint8_t> tokens) {
  return make_windowed(spec, range, std::move(tokens), &Dataset::corpus);
}

Dataset windowed_dataset(const DataSourceSpec& spec, const WindowRange& range, std::vector<int32_t> tokens) {
  return make_windowed(spec, range, std::move(tokens), &Dataset::token_ids);
}

DatasetInfo windowed_info(const DataSourceSpec& spec, const WindowRange& range) {
  DatasetInfo info;
  info.sample_shape = {spec.sequence_length};
  info.count = range.count;
  info.label_width = spec.sequence_length;
  return info;
}

}  // namespace dtrain::data::detail
