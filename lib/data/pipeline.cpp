// The input pipeline (pipeline.h): the epoch order (a TF-style shuffle buffer),
// sharding after the shuffle, batch assembly, and an optional prefetch thread.
//
// A batch is a pure function of (dataset, options, epoch, batch index), assembled
// by the same code whether next() builds it or the prefetch thread does, so the
// two give bit-identical batches. The prefetch thread lives for one epoch: it
// fills a queue of at most `prefetch` batches (two condition variables: one for
// "a batch is ready", one for "there is room"), and start_epoch() and the
// destructor stop it (a flag, a notify, a join) before touching anything it
// reads. An exception in the thread is stored and rethrown by next() after the
// batches queued before it. Decoding a shared Dataset (cache=true) is guarded by a
// process-wide reader/writer lock, which batch assembly holds shared: two
// pipelines over one Dataset decode it once, and never read it while it changes.
// A batch keeps each sample's labels together (label_width of them: a text
// window's next tokens), in sample order.
// A streamed Dataset (tfrecord without the cache) is read in order each epoch
// through a cursor of the pipeline's own, with the same batches as from memory.
#include "data/pipeline.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"

namespace dtrain::data {
namespace {

// Held exclusively while a Dataset is decoded, shared while samples are copied out.
std::shared_mutex& dataset_guard() {
  static std::shared_mutex guard;
  return guard;
}

}  // namespace

Batch Batch::slice(int64_t begin, int64_t count) const {
  Batch out;
  out.images = images.slice_rows(begin, count);
  out.labels = sample_labels(begin, count);
  out.label_width = label_width;
  out.index = index;
  return out;
}

std::vector<int32_t> Batch::sample_labels(int64_t begin, int64_t count) const {
  DT_CHECK(begin >= 0 && count >= 0 && begin + count <= size(), "samples ", begin, "+", count, " of ", size());
  const auto first = labels.begin() + begin * label_width;
  return std::vector<int32_t>(first, first + count * label_width);
}

std::vector<int64_t> epoch_order(int64_t count, int64_t shuffle_buffer, uint64_t seed, int64_t epoch) {
  DT_CHECK_GE(count, 0);
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(count));
  if (shuffle_buffer <= 1 || count <= 1) {
    order.resize(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), int64_t{0});
    return order;
  }
  // tf.data's shuffle: a buffer of the next B elements; emit a uniformly chosen one
  // and put the next input element in its slot; once the input runs out, the buffer
  // shrinks (the last slot moves into the emptied one).
  Rng rng(hash_u64(seed, static_cast<uint64_t>(epoch)));
  const int64_t buffer_size = std::min(shuffle_buffer, count);
  std::vector<int64_t> buffer(static_cast<size_t>(buffer_size));
  std::iota(buffer.begin(), buffer.end(), int64_t{0});
  int64_t next_input = buffer_size;
  while (!buffer.empty()) {
    const auto slot = static_cast<size_t>(rng.below(buffer.size()));
    order.push_back(buffer[slot]);
    if (next_input < count) {
      buffer[slot] = next_input++;
    } else {
      buffer[slot] = buffer.back();
      buffer.pop_back();
    }
  }
  return order;
}

struct Pipeline::Impl {
  std::shared_ptr<Dataset> dataset;
  PipelineOptions options;
  int64_t samples = 0;          // per epoch, for this shard
  int64_t batches = 0;
  std::vector<int64_t> shard_order;  // this shard's sample indices for the current epoch
  bool started = false;
  int64_t next_batch = 0;       // prefetch == 0: the batch next() assembles
  int64_t first = 0, end = 0;   // the batches of this epoch to give (start_range)

  // Prefetch state; everything below is guarded by `mutex`.
  std::thread worker;
  std::mutex mutex;
  std::condition_variable ready;  // a batch was queued, or the worker finished
  std::condition_variable room;   // a batch was taken, or stop was requested
  std::deque<Batch> queue;
  bool stop = false;
  bool worker_done = true;
  std::exception_ptr error;

  // A streamed dataset (dataset->stream): the epoch reads the samples in order;
  // those this shard takes at a later position wait in `pending` (with a shuffle
  // buffer of B, at most about B of them).
  std::unique_ptr<SampleStream::Cursor> cursor;
  int64_t next_read = 0;             // the cursor's next sample
  std::vector<bool> wanted;          // sample index -> this shard still takes it this epoch
  std::unordered_map<int64_t, std::vector<float>> pending;
  std::vector<std::vector<float>> spare;  // buffers of samples taken, reused for the next ones kept
  std::vector<float> skipped;        // where samples other shards take are read to

  // The sharding: this shard takes take() consecutive positions of every
  // block() of the epoch's order, from offset() on.
  static int64_t block(const PipelineOptions& o) {
    return o.shard_sizes.empty() ? o.shard_count : std::accumulate(o.shard_sizes.begin(), o.shard_sizes.end(), int64_t{0});
  }
  static int64_t take(const PipelineOptions& o) {
    return o.shard_sizes.empty() ? 1 : o.shard_sizes[static_cast<size_t>(o.shard_index)];
  }
  static int64_t offset(const PipelineOptions& o) {
    return o.shard_sizes.empty() ? o.shard_index
                                 : std::accumulate(o.shard_sizes.begin(), o.shard_sizes.begin() + o.shard_index, int64_t{0});
  }
  Batch assemble(int64_t b);
  void copy_streamed(int64_t sample, float* out);
  void restart_stream(int64_t first_position);
  void produce();
  void stop_worker();
};

void Pipeline::Impl::restart_stream(int64_t first_position) {
  cursor = dataset->stream->open();
  next_read = 0;
  pending.clear();
  wanted.assign(static_cast<size_t>(dataset->count), false);
  for (int64_t j = first_position; j < samples; ++j) wanted[static_cast<size_t>(shard_order[static_cast<size_t>(j)])] = true;
}

void Pipeline::Impl::copy_streamed(int64_t sample, float* out) {
  const auto numel = static_cast<size_t>(dataset->sample_numel());
  if (const auto it = pending.find(sample); it != pending.end()) {
    std::memcpy(out, it->second.data(), numel * sizeof(float));
    spare.push_back(std::move(it->second));
    pending.erase(it);
    return;
  }
  // Samples come out of the shuffle in an order no more than the buffer ahead of
  // the source's: read on to `sample`, keeping the ones this shard takes later.
  DT_CHECK(sample >= next_read, "sample ", sample, " was read already (next ", next_read, ")");
  while (next_read < sample) {
    const int64_t i = next_read++;
    if (wanted[static_cast<size_t>(i)]) {
      std::vector<float>& keep = pending[i];
      if (!spare.empty()) {
        keep = std::move(spare.back());
        spare.pop_back();
      }
      keep.resize(numel);
      cursor->next(keep.data());
    } else {
      skipped.resize(numel);
      cursor->next(skipped.data());
    }
  }
  ++next_read;
  cursor->next(out);
}

Batch Pipeline::Impl::assemble(int64_t b) {
  const int64_t begin = b * options.batch_size;
  const int64_t n = std::min(options.batch_size, samples - begin);
  DT_CHECK(n > 0, "batch ", b, " of ", batches);
  Shape shape{n};
  shape.insert(shape.end(), dataset->sample_shape.begin(), dataset->sample_shape.end());
  Batch batch;
  batch.index = b;
  // Every value is written below: no zeroing first.
  batch.images = Tensor::uninitialized(std::move(shape));
  const int64_t width = dataset->label_width;
  batch.label_width = width;
  batch.labels.resize(static_cast<size_t>(n * width));
  batch.samples.assign(shard_order.begin() + begin, shard_order.begin() + begin + n);
  const int64_t numel = dataset->sample_numel();
  float* out = batch.images.data();
  std::shared_lock lock(dataset_guard());
  for (int64_t k = 0; k < n; ++k) {
    const int64_t sample = shard_order[static_cast<size_t>(begin + k)];
    if (dataset->stream) copy_streamed(sample, out + k * numel);
    else dataset->copy_sample(sample, out + k * numel);
    dataset->copy_labels(sample, batch.labels.data() + k * width);
  }
  return batch;
}

void Pipeline::Impl::produce() {
  try {
    for (int64_t b = first; b < end; ++b) {
      {
        std::unique_lock lock(mutex);
        room.wait(lock, [&] { return stop || static_cast<int64_t>(queue.size()) < options.prefetch; });
        if (stop) break;
      }
      Batch batch = assemble(b);  // outside the lock: next() can pop meanwhile
      {
        std::lock_guard lock(mutex);
        if (stop) break;
        queue.push_back(std::move(batch));
      }
      ready.notify_one();
    }
  } catch (...) {
    std::lock_guard lock(mutex);
    error = std::current_exception();
  }
  {
    std::lock_guard lock(mutex);
    worker_done = true;
  }
  ready.notify_all();
}

void Pipeline::Impl::stop_worker() {
  if (worker.joinable()) {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    room.notify_all();
    worker.join();
  }
  std::lock_guard lock(mutex);
  queue.clear();
  stop = false;
  worker_done = true;
  error = nullptr;
}

Pipeline::Pipeline(std::shared_ptr<Dataset> dataset, PipelineOptions options)
    : impl_(std::make_unique<Impl>()) {
  DT_CHECK(dataset != nullptr);
  const Dataset& ds = *dataset;
  if (options.batch_size < 1)
    throw ConfigError(str(ds.name, ": the batch size must be >= 1, got ", options.batch_size));
  if (options.prefetch < 0)
    throw ConfigError(str(ds.name, ": prefetch must be >= 0, got ", options.prefetch));
  if (options.shuffle_buffer < 0)
    throw ConfigError(str(ds.name, ": the shuffle buffer must be >= 0, got ", options.shuffle_buffer));
  DT_CHECK(options.shard_count >= 1 && options.shard_index >= 0 &&
               options.shard_index < options.shard_count,
           "shard ", options.shard_index, " of ", options.shard_count);
  {
    // Another pipeline may be decoding this dataset: look at its storage under the guard.
    std::shared_lock lock(dataset_guard());
    DT_CHECK(ds.label_width >= 1, "label width ", ds.label_width);
    if (ds.windowed()) {
      DT_CHECK(ds.count == 0 ||
                   ds.corpus_size() >= (ds.count - 1) * ds.window_stride + ds.label_width + 1,
               "the corpus of ", ds.name, " is shorter than its windows");
    } else {
      DT_CHECK_EQ(static_cast<int64_t>(ds.labels.size()), ds.count * ds.label_width);
      const auto stored = static_cast<int64_t>(std::max(ds.pixels.size(), ds.values.size()));
      if (!ds.stream) DT_CHECK_EQ(stored, ds.count * ds.sample_numel());
    }
  }

  DT_CHECK(options.shard_sizes.empty() || static_cast<int64_t>(options.shard_sizes.size()) == options.shard_count,
           options.shard_sizes.size(), " shard sizes for ", options.shard_count, " shards");
  for (const int64_t size : options.shard_sizes) DT_CHECK(size >= 1, "a shard of ", size, " samples a block");
  impl_->samples = ds.count / impl_->block(options) * impl_->take(options);
  if (impl_->samples == 0)
    throw ConfigError(str(ds.name, ": ", ds.count, " samples cannot give each of ",
                          options.shard_count, " workers one; use more data or fewer workers"));
  impl_->batches = options.drop_remainder
                       ? impl_->samples / options.batch_size
                       : (impl_->samples + options.batch_size - 1) / options.batch_size;
  if (options.cache) {
    // Decode once per Dataset, however many pipelines share it.
    std::unique_lock lock(dataset_guard());
    dataset->decode_all();
  }
  impl_->dataset = std::move(dataset);
  impl_->options = options;
}

Pipeline::~Pipeline() { impl_->stop_worker(); }

const Dataset& Pipeline::dataset() const { return *impl_->dataset; }
int64_t Pipeline::samples_per_epoch() const { return impl_->samples; }
int64_t Pipeline::batches_per_epoch() const { return impl_->batches; }

void Pipeline::start_epoch(int64_t epoch) { start_range(epoch, 0, impl_->batches); }

void Pipeline::start_range(int64_t epoch, int64_t first, int64_t end) {
  Impl& p = *impl_;
  DT_CHECK(0 <= first && first <= end && end <= p.batches, "batches [", first, ", ", end, ") of ", p.batches);
  p.stop_worker();  // it reads shard_order: stop it before that changes
  const std::vector<int64_t> order =
      epoch_order(p.dataset->count, p.options.shuffle_buffer, p.options.seed, epoch);
  // Shard after the shuffle: positions k, k+n, ... of the first samples*n
  // positions (or this shard's run of each block).
  const int64_t block = Impl::block(p.options), take = Impl::take(p.options), offset = Impl::offset(p.options);
  p.shard_order.resize(static_cast<size_t>(p.samples));
  for (int64_t j = 0; j < p.samples; ++j)
    p.shard_order[static_cast<size_t>(j)] = order[static_cast<size_t>(j / take * block + offset + j % take)];
  if (p.dataset->stream) p.restart_stream(first * p.options.batch_size);
  p.first = first;
  p.end = end;
  p.next_batch = first;
  p.started = true;
  if (p.options.prefetch > 0 && end > first) {
    p.worker_done = false;
    try {
      p.worker = std::thread([&p] { p.produce(); });
    } catch (...) {
      p.worker_done = true;  // no thread: next() must not wait for one
      throw;
    }
  }
}

bool Pipeline::next(Batch& out) {
  Impl& p = *impl_;
  DT_CHECK(p.started, "Pipeline::next() called before start_epoch()");
  if (p.options.prefetch == 0) {
    if (p.next_batch >= p.end) return false;
    out = p.assemble(p.next_batch++);
    return true;
  }
  // No deadline needed: the worker never blocks on anything but room in the queue,
  // so it always either queues a batch or finishes.
  std::unique_lock lock(p.mutex);
  p.ready.wait(lock, [&] { return !p.queue.empty() || p.worker_done; });
  if (!p.queue.empty()) {
    out = std::move(p.queue.front());
    p.queue.pop_front();
    lock.unlock();
    p.room.notify_one();
    return true;
  }
  if (p.error) {
    std::exception_ptr error = std::exchange(p.error, nullptr);
    std::rethrow_exception(error);
  }
  return false;
}

}  // namespace dtrain::data
