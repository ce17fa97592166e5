// The synthetic source: a learnable classification set generated from a seed.
//
// Each class has a fixed prototype (elements uniform in [0, 1), drawn from the
// seed and the class number); sample i gets the label hash(seed, i) mod classes and
// the values prototype + noise, the noise drawn from hash(seed, i). Only integer
// operations and single IEEE float multiplies and adds are used (core/rng.h, no std
// distributions, no libm), so every platform produces the same bits, and any
// sample can be generated on its own. The values go straight into `values`; the
// spec's `rescale` does not apply.
// Its registry entry (dataset.h's DataFormat: keys, reader, loaders) closes the file.
#include <limits>

#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"
#include "data/readers.h"

namespace dtrain::data::detail {
namespace {

// Tags that keep the three hash streams apart.
constexpr uint64_t kPrototypeTag = 0x70726f746f747970ull;
constexpr uint64_t kLabelTag = 0x6c6162656c6c6162ull;
constexpr uint64_t kNoiseTag = 0x6e6f6973656e6f69ull;
// The noise is (sum of four 16-bit uniforms - its mean) * kNoiseScale: an
// Irwin-Hall bump with a standard deviation of about 0.29, small next to the
// distance between two prototypes over many elements.
constexpr float kNoiseScale = 0.5f / 65536.0f;
constexpr int64_t kMaxElements = int64_t{1} << 31;  // 8 GiB of floats

int64_t check_fields(const DataSourceSpec& spec) {
  if (spec.shape.empty())
    throw ConfigError(str(spec.path, ".shape: missing: a synthetic source needs the sample "
                                     "shape, e.g. [28, 28, 1]"));
  int64_t numel = 1;
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    if (spec.shape[d] < 1)
      throw ConfigError(str(spec.path, ".shape[", d, "]: must be >= 1, got ", spec.shape[d]));
    if (spec.shape[d] > kMaxElements / numel)
      throw ConfigError(str(spec.path, ".shape: ", shape_str(spec.shape), " is too large"));
    numel *= spec.shape[d];
  }
  if (spec.classes < 1 || spec.classes > std::numeric_limits<int32_t>::max())
    throw ConfigError(str(spec.path, ".classes: must be from 1 to ", std::numeric_limits<int32_t>::max(), ", got ",
                          spec.classes));
  if (spec.count < 1)
    throw ConfigError(str(spec.path, ".count: must be >= 1, got ", spec.count,
                          " (the number of samples to generate)"));
  if (spec.count > kMaxElements / numel)
    throw ConfigError(str(spec.path, ".count: ", spec.count, " samples of shape ",
                          shape_str(spec.shape), " would need ",
                          format_bytes(4.0 * static_cast<double>(spec.count) * numel),
                          " of memory; use fewer samples"));
  return numel;
}

}  // namespace

Dataset load_synthetic(const DataSourceSpec& spec) {
  const int64_t numel = check_fields(spec);
  const auto classes = static_cast<uint64_t>(spec.classes);
  const uint64_t seed = spec.seed;

  std::vector<float> prototypes(static_cast<size_t>(spec.classes * numel));
  for (uint64_t c = 0; c < classes; ++c) {
    Rng rng(hash_u64(seed, kPrototypeTag, c));
    float* proto = prototypes.data() + c * numel;
    for (int64_t j = 0; j < numel; ++j) proto[j] = u64_to_unit_float(rng.next_u64());
  }

  Dataset ds;
  ds.name = spec.path;
  ds.sample_shape = spec.shape;
  ds.count = spec.count;
  ds.rescale = 1.0f;
  ds.values.resize(static_cast<size_t>(spec.count * numel));
  ds.labels.resize(static_cast<size_t>(spec.count));
  for (int64_t i = 0; i < spec.count; ++i) {
    const auto index = static_cast<uint64_t>(i);
    const uint64_t label = hash_u64(seed, kLabelTag, index) % classes;
    ds.labels[i] = static_cast<int32_t>(label);
    const float* proto = prototypes.data() + label * numel;
    float* out = ds.values.data() + i * numel;
    Rng rng(hash_u64(seed, kNoiseTag, index));
    for (int64_t j = 0; j < numel; ++j) {
      const uint64_t r = rng.next_u64();
      const int64_t sum = static_cast<int64_t>((r & 0xffff) + ((r >> 16) & 0xffff) +
                                               ((r >> 32) & 0xffff) + (r >> 48));
      const float noise = static_cast<float>(sum - 2 * 65535) * kNoiseScale;  // exact int -> float
      out[j] = proto[j] + noise;
    }
  }
  return ds;
}

DatasetInfo probe_synthetic(const DataSourceSpec& spec) {
  check_fields(spec);
  DatasetInfo info;
  info.sample_shape = spec.shape;
  info.count = spec.count;
  return info;
}

}  // namespace dtrain::data::detail

namespace dtrain::data {

// The registry entry (dataset.h): keys, reader, loaders.
const DataFormat& synthetic_format() {
  static const DataFormat format{
      "synthetic",
      "deterministic, learnable class prototypes plus noise",
      {{"shape", "the sample shape (required)"},
       {"count", "samples (required, >= 1)"},
       {"classes", "10, >= 2"},
       {"seed", "0"}},
      [](config::Section& r, DataSourceSpec& spec) {
        spec.shape = r.require("shape", " (the sample shape, e.g. [28, 28, 1])").to_shape();
        spec.count = r.require_int("count", 1);
        spec.classes = r.get_int("classes", spec.classes, 2);
        if (spec.classes > std::numeric_limits<int32_t>::max())
          r.fail("classes", str("must be from 2 to ", std::numeric_limits<int32_t>::max(), " (a label is an int32), got ",
                                spec.classes));
        spec.seed = static_cast<uint64_t>(r.get_int("seed", 0, 0));
      },
      detail::load_synthetic, detail::probe_synthetic, false};
  return format;
}

}  // namespace dtrain::data
