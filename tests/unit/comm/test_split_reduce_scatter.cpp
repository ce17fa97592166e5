// Sub-groups (Communicator::split) and reduce_scatter, on Gloo (real TCP on
// 127.0.0.1) and on the local group, ranks as threads: who ends up in which
// group and with which rank, collectives in a sub-group that include only its
// members, and reduce_scatter equal to the slice of an all_reduce for group
// sizes 2 to 8 (Gloo's halving-doubling algorithm has separate paths for sizes
// that are not powers of two) and counts that are and are not powers of two.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/strings.h"
#include "groups.h"

using namespace dtrain;
using namespace dtrain::comm;
using dtrain::test::Backend;
using dtrain::test::check_all_ok;

namespace {

const Backend kBackends[] = {Backend::kGloo, Backend::kLocal};

// Every rank's all_reduce(kSum) of {value} in `c`.
float sum_of(Communicator& c, float value) {
  c.all_reduce(&value, 1, ReduceOp::kSum);
  return value;
}

}  // namespace

TEST_CASE("split by color: 4 ranks into {0, 2} and {1, 3}, whose sums include only their members") {
  for (Backend b : kBackends) {
    DYNAMIC_SECTION(test::backend_name(b)) {
      check_all_ok(test::run_ranks(b, 4, "split/colors/", [](Communicator& c) -> std::string {
        const int r = c.rank();
        auto sub = c.split(r % 2, r);
        if (!sub) return "no group";
        if (sub->size() != 2 || sub->rank() != r / 2)
          return str("rank ", r, " is rank ", sub->rank(), " of ", sub->size(), " in its group");
        // Ranks 0 and 2 add 1 + 3; ranks 1 and 3 add 2 + 4.
        const float sum = sum_of(*sub, static_cast<float>(r + 1));
        if (sum != (r % 2 == 0 ? 4.0f : 6.0f)) return str("rank ", r, ": sum in its group ", sum);
        // The parent still works, over all four.
        if (sum_of(c, 1.0f) != 4.0f) return "parent sum after the split";
        // Point-to-point in the sub-group, with its ranks.
        std::vector<float> x{static_cast<float>(r)};
        if (sub->rank() == 0) {
          sub->send(x.data(), 1, 1, 7);
        } else {
          sub->recv(x.data(), 1, 0, 7);
          if (x[0] != static_cast<float>(r - 2)) return str("rank ", r, " got ", x[0], " from its group's rank 0");
        }
        sub->barrier();
        return "";
      }));
    }
  }
}

TEST_CASE("split orders a group by key, then by rank, and a negative color joins none") {
  for (Backend b : kBackends) {
    DYNAMIC_SECTION(test::backend_name(b)) {
      check_all_ok(test::run_ranks(b, 4, "split/keys/", [](Communicator& c) -> std::string {
        const int r = c.rank();
        // key = -rank reverses the ranks.
        auto reversed = c.split(0, -r);
        if (!reversed || reversed->size() != 4 || reversed->rank() != 3 - r)
          return str("rank ", r, ": reversed rank ", reversed ? reversed->rank() : -1);
        // Its rank 0 is parent rank 3: a broadcast from it gives 3's value.
        float v = static_cast<float>(10 * r);
        reversed->broadcast(&v, 1, 0);
        if (v != 30.0f) return str("rank ", r, ": broadcast from the reversed group's root gave ", v);

        // Equal keys: ordered by parent rank. Rank 3 joins no group.
        auto three = c.split(r == 3 ? -1 : 5, 0);
        if (r == 3) {
          if (three) return "rank 3 got a group for a negative color";
        } else {
          if (!three || three->size() != 3 || three->rank() != r) return str("rank ", r, ": group of three");
          if (sum_of(*three, static_cast<float>(r)) != 3.0f) return "sum over {0, 1, 2}";
          // A split of a split: {0} and {1, 2}, ordered by key (2 before 1).
          auto inner = three->split(r == 0 ? 0 : 1, -r);
          if (!inner) return "no inner group";
          const int expected_rank = r == 0 ? 0 : (r == 2 ? 0 : 1);
          if (inner->size() != (r == 0 ? 1 : 2) || inner->rank() != expected_rank)
            return str("rank ", r, ": inner rank ", inner->rank(), " of ", inner->size());
          if (sum_of(*inner, static_cast<float>(r)) != (r == 0 ? 0.0f : 3.0f)) return "inner sum";
        }
        c.barrier();
        return "";
      }));
    }
  }
}

TEST_CASE("reduce_scatter equals the slice of an all_reduce on 2 to 8 ranks") {
  const std::vector<size_t> counts{1, 2, 3, 5, 8, 64, 100, 1000, 1024, 4099, 1, 1000};  // repeats reuse Gloo's plan
  for (Backend b : kBackends) {
    for (int n = 2; n <= 8; ++n) {
      DYNAMIC_SECTION(test::backend_name(b) << ", " << n << " ranks") {
        check_all_ok(test::run_ranks(b, n, str("rs/", n, "/"), [&](Communicator& c) -> std::string {
          const int r = c.rank();
          for (size_t count : counts) {
            const size_t total = count * static_cast<size_t>(n);
            std::vector<float> in(total);
            for (size_t j = 0; j < total; ++j) in[j] = static_cast<float>((j * 7 + static_cast<size_t>(r) * 13) % 101);
            std::vector<float> reduced = in;
            c.all_reduce(reduced.data(), total, ReduceOp::kSum);
            const std::vector<float> slice(reduced.begin() + static_cast<long>(count * r),
                                           reduced.begin() + static_cast<long>(count * (r + 1)));
            std::vector<float> out(count, -1.0f);
            c.reduce_scatter(in.data(), count, out.data(), ReduceOp::kSum);
            if (auto p = test::compare_exact(out, slice, str("sum, ", count, " per rank")); !p.empty()) return p;
            std::vector<float> mean = slice;
            for (float& v : mean) v /= static_cast<float>(n);
            c.reduce_scatter(in.data(), count, out.data(), ReduceOp::kMean);
            if (auto p = test::compare_exact(out, mean, str("mean, ", count, " per rank")); !p.empty()) return p;
            // The input is left as it was.
            for (size_t j = 0; j < total; ++j)
              if (in[j] != static_cast<float>((j * 7 + static_cast<size_t>(r) * 13) % 101)) return "input changed";
          }
          return "";
        }));
      }
    }
  }
}

TEST_CASE("a buffer padded to padded_count reduce-scatters and all-gathers back whole") {
  CHECK(padded_count(0, 3) == 0);
  CHECK(padded_count(1, 3) == 3);
  CHECK(padded_count(9, 3) == 9);
  CHECK(padded_count(10, 4) == 12);
  CHECK(padded_count(7, 1) == 7);
  check_all_ok(test::run_ranks(Backend::kGloo, 3, "rs/padded/", [](Communicator& c) -> std::string {
    const size_t length = 10, padded = padded_count(length, c.size()), part = padded / 3;
    std::vector<float> grads(padded, 0.0f);
    for (size_t i = 0; i < length; ++i) grads[i] = static_cast<float>(i + c.rank());
    std::vector<float> mine(part), whole(padded);
    c.reduce_scatter(grads.data(), part, mine.data(), ReduceOp::kSum);
    c.all_gather(mine.data(), part, whole.data());
    for (size_t i = 0; i < padded; ++i) {
      const float expected = i < length ? static_cast<float>(3 * i + 3) : 0.0f;
      if (whole[i] != expected) return str("element ", i, " is ", whole[i], ", expected ", expected);
    }
    return "";
  }));
}
