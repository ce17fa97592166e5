// Tests of epoch_order() (permutation, seeding, shuffle-buffer semantics) and of
// Pipeline: sharding after the shuffle, batch sizes, prefetch and cache giving the
// same bits, restarting and destroying mid-epoch, errors from the prefetch thread.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <numeric>
#include <set>
#include <thread>

#include "core/error.h"
#include "data/pipeline.h"

using namespace dtrain;
using namespace dtrain::data;

namespace {

// A dataset whose sample i is the single value i and whose label is i: batches
// tell exactly which samples they hold.
std::shared_ptr<Dataset> index_dataset(int64_t count) {
  auto ds = std::make_shared<Dataset>();
  ds->name = "data.train";
  ds->sample_shape = {1, 1, 1};
  ds->count = count;
  for (int64_t i = 0; i < count; ++i) {
    ds->values.push_back(static_cast<float>(i));
    ds->labels.push_back(static_cast<int32_t>(i));
  }
  ds->max_label = static_cast<int32_t>(count - 1);
  ds->max_label_index = count - 1;
  return ds;
}

// A byte-image dataset (like IDX) with pseudo-random pixels and labels.
std::shared_ptr<Dataset> byte_dataset(int64_t count) {
  auto ds = std::make_shared<Dataset>();
  ds->name = "data.train";
  ds->sample_shape = {3, 2, 2};
  ds->count = count;
  ds->rescale = 1.0f / 255.0f;
  uint32_t x = 12345;
  for (int64_t i = 0; i < count * 12; ++i) {
    x = x * 1664525u + 1013904223u;
    ds->pixels.push_back(static_cast<uint8_t>(x >> 24));
  }
  for (int64_t i = 0; i < count; ++i) ds->labels.push_back(static_cast<int32_t>(i % 7));
  return ds;
}

// The labels of every batch of one epoch, in order.
std::vector<int32_t> epoch_labels(Pipeline& p, int64_t epoch) {
  p.start_epoch(epoch);
  std::vector<int32_t> out;
  Batch b;
  while (p.next(b)) out.insert(out.end(), b.labels.begin(), b.labels.end());
  return out;
}

// Every batch of one epoch (images and labels).
std::vector<Batch> epoch_batches(Pipeline& p, int64_t epoch) {
  p.start_epoch(epoch);
  std::vector<Batch> out;
  Batch b;
  while (p.next(b)) out.push_back(b);
  return out;
}

bool same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].index != b[i].index || a[i].labels != b[i].labels) return false;
    if (a[i].images.shape() != b[i].images.shape()) return false;
    if (std::memcmp(a[i].images.data(), b[i].images.data(), a[i].images.bytes()) != 0) return false;
  }
  return true;
}

bool is_permutation_of_iota(const std::vector<int64_t>& order, int64_t count) {
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(static_cast<size_t>(count));
  std::iota(iota.begin(), iota.end(), int64_t{0});
  return sorted == iota;
}

}  // namespace

TEST_CASE("epoch_order: a permutation for every buffer size, identity without shuffling") {
  const int64_t count = 97;
  for (int64_t buffer : {int64_t{0}, int64_t{1}, int64_t{10}, count, 2 * count}) {
    INFO("buffer " << buffer);
    const std::vector<int64_t> order = epoch_order(count, buffer, 5, 0);
    CHECK(static_cast<int64_t>(order.size()) == count);
    CHECK(is_permutation_of_iota(order, count));
    std::vector<int64_t> iota(count);
    std::iota(iota.begin(), iota.end(), int64_t{0});
    if (buffer <= 1)
      CHECK(order == iota);
    else
      CHECK(order != iota);
  }
  CHECK(epoch_order(0, 10, 1, 0).empty());
  CHECK(epoch_order(1, 10, 1, 0) == std::vector<int64_t>{0});
}

TEST_CASE("epoch_order: depends on the seed and the epoch, and only on them") {
  const auto a = epoch_order(500, 64, 1, 0);
  CHECK(a == epoch_order(500, 64, 1, 0));
  CHECK(a != epoch_order(500, 64, 1, 1));
  CHECK(a != epoch_order(500, 64, 2, 0));
  CHECK(epoch_order(500, 1000, 3, 4) == epoch_order(500, 1000, 3, 4));
  CHECK(epoch_order(500, 1000, 3, 4) != epoch_order(500, 1000, 3, 5));
}

TEST_CASE("epoch_order: a small buffer only emits what it has seen") {
  // After emitting p elements the buffer holds inputs below p + B only, so
  // output position p is an index < p + B; the first is among the first B.
  const int64_t count = 1000, buffer = 16;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto order = epoch_order(count, buffer, seed, 0);
    CHECK(order[0] < buffer);
    int64_t violations = 0;
    for (int64_t p = 0; p < count; ++p) violations += order[p] >= p + buffer;
    CHECK(violations == 0);
  }
  // And it does move things: some element leaves the first 16 positions late.
  const auto order = epoch_order(count, buffer, 1, 0);
  int64_t late = 0;
  for (int64_t p = 0; p < count; ++p) late = std::max(late, p - order[p]);
  CHECK(late > buffer);
}

TEST_CASE("epoch_order: a buffer of at least count is a full shuffle") {
  // With a full buffer any index can come first; with B = 4 only 0..3 can.
  std::set<int64_t> firsts_full, firsts_small;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    firsts_full.insert(epoch_order(10, 10, seed, 0)[0]);
    firsts_small.insert(epoch_order(10, 4, seed, 0)[0]);
  }
  CHECK(firsts_full.size() == 10);
  CHECK(firsts_small == std::set<int64_t>{0, 1, 2, 3});
}

TEST_CASE("pipeline: shards are disjoint and cover the first floor(count/n)*n positions") {
  const int64_t count = 103, n = 4;
  const auto order = epoch_order(count, 32, 9, 2);
  std::vector<int32_t> all;
  for (int64_t k = 0; k < n; ++k) {
    PipelineOptions o;
    o.batch_size = 8;
    o.shuffle_buffer = 32;
    o.seed = 9;
    o.shard_count = n;
    o.shard_index = k;
    Pipeline p(index_dataset(count), o);
    CHECK(p.samples_per_epoch() == 25);
    CHECK(p.batches_per_epoch() == 4);
    const std::vector<int32_t> labels = epoch_labels(p, 2);
    REQUIRE(labels.size() == 25);
    for (int64_t j = 0; j < 25; ++j) CHECK(labels[j] == order[k + j * n]);
    all.insert(all.end(), labels.begin(), labels.end());
  }
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());  // disjoint
  std::vector<int32_t> expected(order.begin(), order.begin() + 100);
  std::sort(expected.begin(), expected.end());
  CHECK(all == expected);
}

TEST_CASE("pipeline: shard_sizes give each shard its run of every block, disjoint, all 1 as without") {
  const int64_t count = 103;
  const auto order = epoch_order(count, 32, 9, 1);
  const auto options = [](std::vector<int64_t> sizes, int64_t index, int64_t batch) {
    PipelineOptions o;
    o.batch_size = batch;
    o.shuffle_buffer = 32;
    o.seed = 9;
    o.shard_count = static_cast<int64_t>(sizes.size());
    o.shard_index = index;
    o.shard_sizes = sizes;
    return o;
  };
  // 3, 3 and 2 of every block of 8: 12 blocks, 96 positions.
  const std::vector<int64_t> sizes = {3, 3, 2};
  std::vector<int32_t> all;
  int64_t offset = 0;
  for (int64_t k = 0; k < 3; ++k) {
    Pipeline p(index_dataset(count), options(sizes, k, sizes[k]));
    CHECK(p.samples_per_epoch() == 12 * sizes[k]);
    CHECK(p.batches_per_epoch() == 12);  // a batch of its run for every block
    const std::vector<int32_t> labels = epoch_labels(p, 1);
    REQUIRE(labels.size() == static_cast<size_t>(12 * sizes[k]));
    for (int64_t j = 0; j < 12 * sizes[k]; ++j)
      CHECK(labels[j] == order[j / sizes[k] * 8 + offset + j % sizes[k]]);
    all.insert(all.end(), labels.begin(), labels.end());
    offset += sizes[k];
  }
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  std::vector<int32_t> expected(order.begin(), order.begin() + 96);
  std::sort(expected.begin(), expected.end());
  CHECK(all == expected);
  // Sizes of 1 are shard_count / shard_index's interleaving.
  PipelineOptions plain = options({1, 1, 1, 1}, 2, 5);
  Pipeline ones(index_dataset(count), plain);
  plain.shard_sizes.clear();
  Pipeline without(index_dataset(count), plain);
  CHECK(epoch_labels(ones, 1) == epoch_labels(without, 1));
}

TEST_CASE("pipeline: each epoch visits every sample once, in an order that changes") {
  PipelineOptions o;
  o.batch_size = 10;
  o.shuffle_buffer = 1000;
  Pipeline p(index_dataset(50), o);
  const auto e0 = epoch_labels(p, 0);
  const auto e1 = epoch_labels(p, 1);
  CHECK(e0 != e1);
  for (const auto& e : {e0, e1}) {
    std::vector<int64_t> as64(e.begin(), e.end());
    CHECK(is_permutation_of_iota(as64, 50));
  }
  CHECK(e0 == epoch_labels(p, 0));  // an epoch can be replayed
}

TEST_CASE("pipeline: the last batch is smaller, or dropped with drop_remainder") {
  for (bool drop : {false, true}) {
    for (int64_t prefetch : {0, 2}) {
      PipelineOptions o;
      o.batch_size = 8;
      o.drop_remainder = drop;
      o.prefetch = prefetch;
      Pipeline p(index_dataset(21), o);
      CHECK(p.batches_per_epoch() == (drop ? 2 : 3));
      const std::vector<Batch> batches = epoch_batches(p, 0);
      REQUIRE(static_cast<int64_t>(batches.size()) == p.batches_per_epoch());
      for (size_t i = 0; i < batches.size(); ++i) {
        CHECK(batches[i].index == static_cast<int64_t>(i));
        CHECK(batches[i].images.shape() == Shape{batches[i].size(), 1, 1, 1});
      }
      CHECK(batches[0].size() == 8);
      CHECK(batches.back().size() == (drop ? 8 : 5));
      if (!drop) CHECK(batches.back().labels == std::vector<int32_t>{16, 17, 18, 19, 20});
    }
  }
}

TEST_CASE("pipeline: batches are bit-identical with and without prefetch and cache") {
  std::vector<std::vector<Batch>> runs;
  for (bool cache : {false, true}) {
    for (int64_t prefetch : {0, 3}) {
      PipelineOptions o;
      o.batch_size = 7;
      o.shuffle_buffer = 20;
      o.seed = 42;
      o.cache = cache;
      o.prefetch = prefetch;
      o.shard_count = 2;
      o.shard_index = 1;
      auto ds = byte_dataset(60);
      Pipeline p(ds, o);
      CHECK(ds->pixels.empty() == cache);  // cache decodes up front
      std::vector<Batch> all = epoch_batches(p, 0);
      const std::vector<Batch> e1 = epoch_batches(p, 1);
      all.insert(all.end(), e1.begin(), e1.end());
      runs.push_back(all);
    }
  }
  REQUIRE(runs[0].size() == 10);  // 30 samples per shard, 5 batches, 2 epochs
  CHECK(runs[0][0].images.shape() == Shape{7, 3, 2, 2});
  for (size_t r = 1; r < runs.size(); ++r) CHECK(same_batches(runs[0], runs[r]));
  // And the values are the bytes times rescale.
  const auto ds = byte_dataset(60);
  const Batch& b = runs[0][0];
  const int32_t first = epoch_order(60, 20, 42, 0)[1];
  CHECK(b.images.data()[5] == static_cast<float>(ds->pixels[first * 12 + 5]) * (1.0f / 255.0f));
}

TEST_CASE("pipeline: a batch keeps its own tensor after later batches arrive") {
  PipelineOptions o;
  o.batch_size = 4;
  o.prefetch = 2;
  Pipeline p(index_dataset(40), o);
  p.start_epoch(0);
  Batch first, other;
  REQUIRE(p.next(first));
  for (int i = 0; i < 5; ++i) REQUIRE(p.next(other));
  CHECK(first.images.data()[0] == 0.0f);
  CHECK(first.images.data()[3] == 3.0f);
  CHECK(other.images.data()[0] == 20.0f);
}

TEST_CASE("pipeline: start_epoch in the middle of an epoch with prefetch restarts cleanly") {
  PipelineOptions o;
  o.batch_size = 2;
  o.prefetch = 1;  // the thread is soon blocked on a full queue
  o.shuffle_buffer = 8;
  Pipeline p(index_dataset(200), o);
  Pipeline fresh(index_dataset(200), o);
  const auto expected = epoch_labels(fresh, 3);
  for (int round = 0; round < 20; ++round) {
    p.start_epoch(round);
    Batch b;
    REQUIRE(p.next(b));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(epoch_labels(p, 3) == expected);
}

// Runs f on a thread of its own and says whether it returned within `seconds`.
// The thread is detached, so a hang fails the test here (with its line) instead
// of at ctest's timeout.
bool returns_within(double seconds, std::function<void()> f) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([f = std::move(f), done] {
    f();
    done->set_value();
  }).detach();
  return finished.wait_for(std::chrono::duration<double>(seconds)) == std::future_status::ready;
}

TEST_CASE("pipeline: destroying a pipeline mid-epoch does not hang") {
  for (int64_t prefetch : {1, 4}) {
    INFO("prefetch " << prefetch);
    PipelineOptions o;
    o.batch_size = 3;
    o.prefetch = prefetch;
    auto ds = byte_dataset(300);
    int64_t first_batch = 0;
    CHECK(returns_within(10.0, [&] {
      Pipeline p(ds, o);
      p.start_epoch(0);
      Batch b;
      if (p.next(b)) first_batch = b.size();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the queue fill
    }));
    CHECK(first_batch == 3);
    CHECK(returns_within(10.0, [&] {
      Pipeline p(ds, o);
      p.start_epoch(0);  // never read
    }));
    CHECK(returns_within(10.0, [&] { Pipeline p(ds, o); }));  // never started
  }
}

TEST_CASE("pipeline: an error in the prefetch thread is rethrown by next()") {
  PipelineOptions o;
  o.batch_size = 4;
  o.prefetch = 2;
  o.cache = false;
  auto ds = byte_dataset(20);
  Pipeline p(ds, o);
  ds->pixels.clear();  // the samples are gone: assembling a batch fails
  p.start_epoch(0);
  Batch b;
  CHECK_THROWS_AS(p.next(b), InternalError);
  CHECK_FALSE(p.next(b));  // the epoch is over after the error
  p.start_epoch(1);
  CHECK_THROWS_AS(p.next(b), InternalError);
}

TEST_CASE("pipeline: pipelines sharing a dataset decode it once, even from two threads") {
  auto ds = byte_dataset(500);
  PipelineOptions cached;
  cached.batch_size = 50;
  cached.prefetch = 2;
  PipelineOptions uncached = cached;
  uncached.cache = false;
  std::unique_ptr<Pipeline> a, b;
  std::thread t1([&] { a = std::make_unique<Pipeline>(ds, cached); });
  std::thread t2([&] { b = std::make_unique<Pipeline>(ds, cached); });
  t1.join();
  t2.join();
  CHECK(ds->pixels.empty());
  CHECK(ds->values.size() == 500u * 12u);
  Pipeline reference(byte_dataset(500), uncached);
  const auto expected = epoch_batches(reference, 0);
  CHECK(same_batches(epoch_batches(*a, 0), expected));
  CHECK(same_batches(epoch_batches(*b, 0), expected));
}

TEST_CASE("pipeline: impossible options are ConfigErrors") {
  PipelineOptions o;
  o.batch_size = 0;
  CHECK_THROWS_AS(Pipeline(index_dataset(10), o), ConfigError);
  o.batch_size = 4;
  o.shard_count = 11;
  o.shard_index = 0;
  CHECK_THROWS_AS(Pipeline(index_dataset(10), o), ConfigError);
  o.shard_count = 1;
  Pipeline p(index_dataset(10), o);
  Batch b;
  CHECK_THROWS_AS(p.next(b), InternalError);  // next() before start_epoch()
}
