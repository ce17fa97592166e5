// load_dataset() / probe_dataset(): the format registry's reader for spec.format, then what
// every format shares (check `take` and `rescale`, keep the first `take` samples,
// find the largest label); and the Dataset methods that turn stored bytes into
// floats (value = byte * rescale, computed the same way everywhere so cached and
// uncached batches are bit-identical).
#include "data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "data/readers.h"

namespace dtrain::data {
namespace {

[[noreturn]] void missing_format(const DataSourceSpec& spec) {
  throw ConfigError(str(spec.path, ".format: missing; use one of: ", join(config::entry_names(data_formats()), ", ")));
}

void check_common(const DataSourceSpec& spec) {
  if (!spec.format) missing_format(spec);
  if (spec.take < 0)
    throw ConfigError(str(spec.path, ".take: must be >= 0 (0 = all samples), got ", spec.take));
  if (spec.format->rescales && (!std::isfinite(spec.rescale) || spec.rescale == 0.0))
    throw ConfigError(str(spec.path, ".rescale: must be a finite, non-zero number, got ",
                          spec.rescale, " (1/255 maps bytes to [0, 1])"));
}

// Keeps the first `take` samples (take > 0), then finds the largest label.
void finish(Dataset& ds, int64_t take) {
  if (ds.windowed()) {
    DT_CHECK_EQ(ds.label_width, ds.sample_numel());
    DT_CHECK(ds.corpus.empty() || ds.token_ids.empty(), ds.name, " holds its tokens in both widths");
    if (take > 0 && take < ds.count) {
      ds.count = take;
      const auto used = static_cast<size_t>((take - 1) * ds.window_stride + ds.label_width + 1);
      auto keep = [used](auto& tokens) {
        if (tokens.empty()) return;
        tokens.resize(used);
        tokens.shrink_to_fit();
      };
      keep(ds.corpus);
      keep(ds.token_ids);
    }
    DT_CHECK_LE((ds.count - 1) * ds.window_stride + ds.label_width + 1, ds.corpus_size());
    const Dataset::TokenAt largest = ds.largest_token(/*labels=*/true);
    ds.max_label = largest.id;
    ds.max_label_index = largest.sample;
    return;
  }
  if (take > 0 && take < ds.count) {
    const auto numel = static_cast<size_t>(ds.sample_numel());
    ds.count = take;
    if (!ds.pixels.empty()) {
      ds.pixels.resize(static_cast<size_t>(take) * numel);
      ds.pixels.shrink_to_fit();
    }
    if (!ds.values.empty()) {
      ds.values.resize(static_cast<size_t>(take) * numel);
      ds.values.shrink_to_fit();
    }
    ds.labels.resize(static_cast<size_t>(take * ds.label_width));
  }
  DT_CHECK_EQ(static_cast<int64_t>(ds.labels.size()), ds.count * ds.label_width);
  ds.max_label = -1;
  ds.max_label_index = -1;
  for (int64_t j = 0; j < static_cast<int64_t>(ds.labels.size()); ++j) {
    if (ds.labels[j] > ds.max_label) {
      ds.max_label = ds.labels[j];
      ds.max_label_index = j / ds.label_width;
    }
  }
}

}  // namespace

int64_t Dataset::sample_numel() const { return shape_numel(sample_shape); }

int64_t Dataset::corpus_size() const {
  return static_cast<int64_t>(token_ids.empty() ? corpus.size() : token_ids.size());
}

int32_t Dataset::corpus_token(int64_t p) const {
  return token_ids.empty() ? int32_t{corpus[static_cast<size_t>(p)]} : token_ids[static_cast<size_t>(p)];
}

// Each token the windows' samples (or labels) cover is looked at once, however
// much the windows overlap.
Dataset::TokenAt Dataset::largest_token(bool labels) const {
  TokenAt largest;
  if (!windowed()) return largest;
  const int64_t width = labels ? label_width : sample_numel();
  int64_t scanned = 0;  // tokens before this are looked at
  for (int64_t i = 0; i < count; ++i) {
    const int64_t first = i * window_stride + (labels ? 1 : 0);
    for (int64_t p = std::max(first, scanned); p < first + width; ++p) {
      const int32_t id = corpus_token(p);
      if (id > largest.id) largest = {id, p, i};
    }
    scanned = std::max(scanned, first + width);
  }
  return largest;
}

void Dataset::copy_sample(int64_t i, float* out) const {
  DT_CHECK(i >= 0 && i < count, "sample ", i, " of ", count, " in ", name);
  DT_CHECK(!stream, name, " is streamed: its samples are read in order through the stream");
  const auto numel = static_cast<size_t>(sample_numel());
  if (windowed()) {
    const size_t begin = static_cast<size_t>(i * window_stride);
    DT_CHECK_LE(static_cast<int64_t>(begin + numel + 1), corpus_size());
    // Token ids, exact as floats (the readers keep them below 2^24).
    if (token_ids.empty()) {
      const uint8_t* src = corpus.data() + begin;
      for (size_t j = 0; j < numel; ++j) out[j] = static_cast<float>(src[j]);
    } else {
      const int32_t* src = token_ids.data() + begin;
      for (size_t j = 0; j < numel; ++j) out[j] = static_cast<float>(src[j]);
    }
    return;
  }
  const size_t begin = static_cast<size_t>(i) * numel;
  if (!values.empty()) {
    DT_CHECK_LE(begin + numel, values.size());
    std::memcpy(out, values.data() + begin, numel * sizeof(float));
    return;
  }
  DT_CHECK(!pixels.empty(), "dataset ", name, " holds no sample data");
  DT_CHECK_LE(begin + numel, pixels.size());
  const uint8_t* src = pixels.data() + begin;
  const float scale = rescale;
  for (size_t j = 0; j < numel; ++j) out[j] = static_cast<float>(src[j]) * scale;
}

void Dataset::copy_labels(int64_t i, int32_t* out) const {
  DT_CHECK(i >= 0 && i < count, "sample ", i, " of ", count, " in ", name);
  const auto width = static_cast<size_t>(label_width);
  if (windowed()) {
    const size_t begin = static_cast<size_t>(i * window_stride) + 1;  // the next token of each position
    DT_CHECK_LE(static_cast<int64_t>(begin + width), corpus_size());
    if (token_ids.empty()) {
      std::copy_n(corpus.data() + begin, width, out);
    } else {
      std::copy_n(token_ids.data() + begin, width, out);
    }
    return;
  }
  const size_t begin = static_cast<size_t>(i) * width;
  DT_CHECK_LE(begin + width, labels.size());
  std::copy_n(labels.data() + begin, width, out);
}

void Dataset::decode_all() {
  if (pixels.empty()) return;  // already decoded, generated as floats, or a windowed corpus
  DT_CHECK_EQ(static_cast<int64_t>(pixels.size()), count * sample_numel());
  values.resize(pixels.size());
  const float scale = rescale;
  const int64_t n = static_cast<int64_t>(pixels.size());
  // Uses the compute thread count (runtime.threads / --threads); each value is
  // written once, so the result does not depend on it.
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) values[j] = static_cast<float>(pixels[j]) * scale;
  pixels.clear();
  pixels.shrink_to_fit();
}

#define DT_DATA_FORMAT(function) const DataFormat& function();
#include "data/formats.inc"
#undef DT_DATA_FORMAT

const std::vector<const DataFormat*>& data_formats() {
  static const std::vector<const DataFormat*> all = {
#define DT_DATA_FORMAT(function) &function(),
#include "data/formats.inc"
#undef DT_DATA_FORMAT
  };
  return all;
}

const DataFormat& data_format(const std::string& name) {
  return config::find_entry(data_formats(), name, "data format");
}

DatasetInfo probe_dataset(const DataSourceSpec& spec) {
  check_common(spec);
  DatasetInfo info = spec.format->probe(spec);
  if (spec.take > 0) info.count = std::min(info.count, spec.take);
  return info;
}

std::vector<std::string> expand_files(const DataSourceSpec& spec) {
  std::vector<std::string> files;
  for (size_t i = 0; i < spec.files.size(); ++i) {
    const std::string& pattern = spec.files[i];
    if (pattern.find_first_of("*?[") == std::string::npos) {
      files.push_back(pattern);
      continue;
    }
    glob_t matches{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
    for (size_t m = 0; rc == 0 && m < matches.gl_pathc; ++m) files.emplace_back(matches.gl_pathv[m]);
    globfree(&matches);
    if (rc == GLOB_NOMATCH)
      throw IoError(str(spec.path, ".files[", i, "]: '", pattern, "' matches no file; fix the pattern or the path"));
    if (rc != 0) throw IoError(str(spec.path, ".files[", i, "]: cannot expand '", pattern, "' (glob error ", rc, ")"));
  }
  return files;
}

Dataset load_dataset(const DataSourceSpec& spec) {
  check_common(spec);
  Dataset ds = spec.stream && spec.format->stream ? spec.format->stream(spec) : spec.format->load(spec);
  finish(ds, spec.take);
  return ds;
}

}  // namespace dtrain::data
