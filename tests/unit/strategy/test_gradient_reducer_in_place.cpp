// The gradient reducer on a communicator that reduces pieces in place (shared
// memory between ranks on threads): it hands the gradients over where they lie
// (all_reduce_pieces, no all_reduce of a buffer of its own), and the gradients,
// the values riding along and the count of non-finite values come out as on a
// communicator without that (the buffered path), step after step.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "comm/shm/shm_communicator.h"
#include "rendezvous/store.h"
#include "strategy/sync/gradient_reducer.h"
#include "support/rank_threads.h"

using namespace dtrain;

namespace {

// Forwards to `inner`, counts all_reduce and all_reduce_pieces calls, and says
// it reduces pieces in place only when `in_place` (else the reducer must pack).
class Counting final : public comm::Communicator {
 public:
  Counting(comm::Communicator& inner, bool in_place) : inner_(inner), in_place_(in_place) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce(float* data, size_t count, comm::ReduceOp op) override {
    ++all_reduces;
    inner_.all_reduce(data, count, op);
  }
  void all_reduce_pieces(std::span<const comm::Piece> pieces, comm::ReduceOp op) override {
    ++piece_reduces;
    inner_.all_reduce_pieces(pieces, op);
  }
  bool reduces_pieces_in_place() const override { return in_place_; }
  void broadcast(float* data, size_t count, int root) override { inner_.broadcast(data, count, root); }
  void all_gather(const float* in, size_t count, float* out) override { inner_.all_gather(in, count, out); }
  void reduce_scatter(const float* in, size_t count_per_rank, float* out, comm::ReduceOp op) override {
    inner_.reduce_scatter(in, count_per_rank, out, op);
  }
  void barrier() override { inner_.barrier(); }

  int all_reduces = 0;
  int piece_reduces = 0;

 private:
  comm::Communicator& inner_;
  bool in_place_;
};

struct Outcome {
  std::vector<std::vector<float>> grads;  // after the last step, per param
  std::vector<std::vector<float>> extras;  // per step
  std::vector<size_t> non_finite;          // per step
  int all_reduces = 0;
  int piece_reduces = 0;
};

// Three params (5, 3 and 4 values; bytes_per_pack 16: two buckets), 3 steps on
// 2 ranks over shared memory; rank r's gradient value i at step s is
// (r + 1) * (i + 1) + s, except one inf on rank 1 at step 1.
std::vector<Outcome> run(bool in_place, const std::string& prefix) {
  constexpr int kRanks = 2;
  rendezvous::InMemoryStore store;
  std::vector<Outcome> outcomes(kRanks);
  test::check_all_ok(test::run_on_threads(kRanks, [&](int rank) -> std::string {
    comm::ShmOptions o;
    o.rank = rank;
    o.size = kRanks;
    o.prefix = prefix;
    o.job_id = "reducer-test";
    o.timeout_seconds = 10.0;
    o.capacity_floats = 5;  // several chunks
    auto shm = comm::make_shm_communicator(store, o);
    Counting comm(*shm, in_place);
    std::vector<nn::Param> params(3);
    const std::vector<int64_t> sizes = {5, 3, 4};
    for (size_t p = 0; p < params.size(); ++p) {
      params[p].name = "p" + std::to_string(p);
      params[p].value = Tensor({sizes[p]});
      params[p].grad = Tensor({sizes[p]});
    }
    std::vector<nn::Param*> pointers = {&params[0], &params[1], &params[2]};
    strategy::GradientReducer reducer(pointers, comm, 16);
    if (reducer.bucket_count() != 2) return "expected 2 buckets, got " + std::to_string(reducer.bucket_count());
    reducer.track_non_finite();
    reducer.ride_along(2, [&](float* out) {
      out[0] = 10.0f * static_cast<float>(rank + 1);
      out[1] = static_cast<float>(reducer.non_finite());
    });
    Outcome& outcome = outcomes[static_cast<size_t>(rank)];
    for (int step = 0; step < 3; ++step) {
      for (nn::Param& p : params)
        for (int64_t i = 0; i < p.grad.numel(); ++i)
          p.grad.data()[i] = static_cast<float>((rank + 1) * (i + 1) + step);
      if (rank == 1 && step == 1) params[1].grad.data()[2] = INFINITY;
      reducer.begin_step();
      for (int p = 2; p >= 0; --p) reducer.param_ready(&params[static_cast<size_t>(p)]);  // backward order
      reducer.finish_step();
      outcome.non_finite.push_back(reducer.non_finite());
      outcome.extras.push_back(reducer.extras());
    }
    for (nn::Param& p : params) outcome.grads.emplace_back(p.grad.data(), p.grad.data() + p.grad.numel());
    outcome.all_reduces = comm.all_reduces;
    outcome.piece_reduces = comm.piece_reduces;
    return "";
  }));
  return outcomes;
}

}  // namespace

TEST_CASE("gradient reducer: in place on shared memory, the same gradients, sums and counts as through buffers") {
  const std::vector<Outcome> in_place = run(true, "reducer/in-place/");
  const std::vector<Outcome> buffered = run(false, "reducer/buffered/");
  for (size_t rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    // In place: one all_reduce_pieces a bucket and step, never a buffer of its own.
    CHECK(in_place[rank].piece_reduces == 6);
    CHECK(in_place[rank].all_reduces == 0);
    CHECK(buffered[rank].piece_reduces == 0);
    CHECK(buffered[rank].all_reduces == 6);
    // The last step's mean: ((1 + 2) * (i + 1) + 2 * 2) / 2.
    for (const std::vector<float>& grad : in_place[rank].grads)
      for (size_t i = 0; i < grad.size(); ++i) CHECK(grad[i] == (3.0f * static_cast<float>(i + 1) + 4.0f) / 2.0f);
    CHECK(in_place[rank].grads == buffered[rank].grads);
    // 10 + 20, and the job's count of non-finite values: rank 1's inf at step 1.
    CHECK(in_place[rank].extras == std::vector<std::vector<float>>{{30.0f, 0.0f}, {30.0f, 1.0f}, {30.0f, 0.0f}});
    CHECK(in_place[rank].extras == buffered[rank].extras);
    CHECK(in_place[rank].non_finite == buffered[rank].non_finite);
  }
  CHECK(in_place[1].non_finite == std::vector<size_t>{0, 1, 0});  // rank 1's inf at step 1
  CHECK(in_place[0].non_finite == std::vector<size_t>{0, 0, 0});
}
