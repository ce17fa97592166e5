// The input pipeline: shard -> shuffle -> batch -> prefetch, like tf.data.
//
// Each epoch has a fixed sample order computed from (seed, epoch): a TF-style
// shuffle buffer over the dataset order (a buffer >= count is a full shuffle),
// then sharding (worker k of n keeps positions k, k+n, k+2n, ... of that order, so
// all workers see disjoint parts of the same shuffled epoch; with shard_sizes,
// worker k keeps its run of shard_sizes[k] positions in each block of their sum:
// an elastic group's uneven split), then batching. The
// batches are identical with and without prefetching; prefetch only moves their
// assembly onto one background thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "tensor/tensor.h"

namespace dtrain::data {

struct PipelineOptions {
  int64_t batch_size = 32;
  int64_t shuffle_buffer = 0;  // 0 or 1: dataset order
  uint64_t seed = 1;
  bool drop_remainder = false;
  int64_t prefetch = 0;        // batches prepared ahead (0 = assemble in next())
  bool cache = true;           // decode byte images to floats once, up front
  int64_t shard_count = 1;
  int64_t shard_index = 0;
  // Non-empty (shard_count entries): shard k takes shard_sizes[k] consecutive
  // positions of every block of sum(shard_sizes) (all 1: the same as empty).
  std::vector<int64_t> shard_sizes = {};
};

struct Batch {
  Tensor images;                // (N, H, W, C)
  std::vector<int32_t> labels;  // N * label_width labels, sample by sample
  int64_t label_width = 1;      // labels per sample (a sequence's T next tokens)
  int64_t index = 0;            // batch number within the epoch
  std::vector<int64_t> samples;  // the dataset's index of each sample (DTRAIN_SAMPLE_LOG's audit)
  // Samples in the batch.
  int64_t size() const { return static_cast<int64_t>(labels.size()) / label_width; }
  // Samples [begin, begin + count): their images (sharing storage) and labels.
  Batch slice(int64_t begin, int64_t count) const;
  // The labels of samples [begin, begin + count), label_width each.
  std::vector<int32_t> sample_labels(int64_t begin, int64_t count) const;
};

// The sample order of one epoch before sharding (exposed for tests).
std::vector<int64_t> epoch_order(int64_t count, int64_t shuffle_buffer, uint64_t seed, int64_t epoch);

class Pipeline {
 public:
  Pipeline(std::shared_ptr<Dataset> dataset, PipelineOptions options);
  ~Pipeline();  // stops and joins the prefetch thread
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  const Dataset& dataset() const;
  // Samples this shard sees per epoch, and the batches they make.
  int64_t samples_per_epoch() const;
  int64_t batches_per_epoch() const;

  // Begins epoch `epoch` (0-based). Any batches left from the previous epoch are dropped.
  void start_epoch(int64_t epoch);
  // Begins epoch `epoch` with only its batches [first, end) (a parameter server's
  // work unit): the same batches start_epoch() would give at those positions.
  void start_range(int64_t epoch, int64_t first, int64_t end);
  // The next batch of the current epoch; false when the epoch is exhausted.
  bool next(Batch& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::data
