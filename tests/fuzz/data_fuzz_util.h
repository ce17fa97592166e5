// What the data fuzz targets share: a source spec for one of the formats, and a
// check that a loaded dataset is whole (every sample can be copied out) and agrees
// with the probe (which reads only what it must).
#pragma once

#include <vector>

#include "data/dataset.h"
#include "fuzz_support.h"

namespace dtrain::fuzz {

inline data::DataSourceSpec source_spec(const std::string& format) {
  data::DataSourceSpec spec;
  spec.path = "data.train";
  spec.format = &data::data_format(format);
  spec.parallel_calls = 1;
  return spec;
}

// Loads `spec`; a dataset that loads must give every sample and its labels
// (cached, streamed or windowed) without an internal error, and the probe must then
// agree on the count; files that do not load are probed too. Returns whether it loaded.
inline bool load_and_check(const data::DataSourceSpec& spec) {
  const bool loaded = expect_clean([&] {
    const data::Dataset ds = data::load_dataset(spec);
    if (!ds.windowed() && static_cast<int64_t>(ds.labels.size()) != ds.count * ds.label_width)
      fuzz_fail("a dataset has label_width labels per sample", "");
    std::vector<float> sample(static_cast<size_t>(ds.sample_numel()));
    std::vector<int32_t> labels(static_cast<size_t>(ds.label_width));
    if (ds.stream) {
      auto cursor = ds.stream->open();
      for (int64_t i = 0; i < ds.count; ++i) cursor->next(sample.data());
    } else {
      for (int64_t i = 0; i < ds.count; ++i) {
        ds.copy_sample(i, sample.data());
        ds.copy_labels(i, labels.data());
        for (int32_t l : labels)
          if (l < 0 || l > ds.max_label) fuzz_fail("a label is outside 0..max_label", std::to_string(l));
      }
    }
    data::DatasetInfo info;
    try {
      info = data::probe_dataset(spec);
    } catch (const Error& e) {
      fuzz_fail("probe_dataset() refuses files that load_dataset() reads", e.what());
    }
    if (info.count != ds.count)
      fuzz_fail("probe_dataset() and load_dataset() disagree on the count",
                std::to_string(info.count) + " vs " + std::to_string(ds.count));
  });
  if (!loaded) expect_clean([&] { data::probe_dataset(spec); });  // its own checks, on bad files too
  return loaded;
}

}  // namespace dtrain::fuzz
