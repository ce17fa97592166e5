// A tiny job for strategy tests (6 inputs, Dense 8 tanh, Dense 3, Adam, batch 4
// per replica, seed 7) under any strategy.type, and deterministic batches for it.
// (The job is parsed with lib/job: tests may link above the module they test.)
#pragma once

#include <string>

#include "core/rng.h"
#include "data/pipeline.h"
#include "job/job_config.h"

namespace dtrain::test {

// `extra`: more keys of the strategy section, e.g. R"(, "mode": "sync")".
inline job::JobConfig tiny_dense_job(const std::string& strategy, const std::string& extra = "") {
  return job::parse_job_config(R"({
    "strategy": {"type": ")" + strategy + "\"" + extra + R"(},
    "model": {"input_shape": [6], "layers": [{"type": "Dense", "units": 8, "activation": "tanh"},
                                             {"type": "Dense", "units": 3}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": true},
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "data": {"train": {"format": "synthetic", "shape": [6], "count": 64, "classes": 3}},
    "train": {"batch_size_per_replica": 4, "seed": 7}})",
                               "job.json");
}

// Batch `key` of `rows` rows, starting at row `first` of a fixed random stream.
inline data::Batch tiny_dense_batch(int64_t key, int64_t first, int64_t rows) {
  data::Batch b;
  b.images = Tensor({rows, 6});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < 6; ++c)
      b.images.data()[r * 6 + c] = u64_to_unit_float(hash_u64(key, first + r, c)) * 2.0f - 1.0f;
    b.labels.push_back(static_cast<int32_t>(hash_u64(key, first + r, 99) % 3));
  }
  b.index = key;
  return b;
}

}  // namespace dtrain::test
