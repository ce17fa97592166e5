// tensor: storage sharing, reshapes, row slices, clones, device names.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "tensor/tensor.h"

using namespace dtrain;

TEST_CASE("a new tensor is zero-filled, aligned and counts its elements") {
  Tensor t({3, 4, 5});
  CHECK(t.numel() == 60);
  CHECK(t.bytes() == 240);
  CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
  for (int64_t i = 0; i < t.numel(); ++i) REQUIRE(t.data()[i] == 0.0f);
}

TEST_CASE("copies and reshapes share storage, clone does not") {
  Tensor a({2, 3});
  Tensor b = a.reshaped({6});
  b.data()[4] = 7.0f;
  CHECK(a.data()[4] == 7.0f);
  Tensor c = a.clone();
  c.data()[4] = 1.0f;
  CHECK(a.data()[4] == 7.0f);
  CHECK_THROWS_AS(a.reshaped({5}), InternalError);
}

TEST_CASE("slice_rows views a range of the first dimension") {
  Tensor a({4, 2});
  for (int i = 0; i < 8; ++i) a.data()[i] = static_cast<float>(i);
  Tensor s = a.slice_rows(1, 2);
  CHECK(s.shape() == Shape{2, 2});
  CHECK(s.data()[0] == 2.0f);
  s.data()[3] = 99.0f;
  CHECK(a.data()[5] == 99.0f);
  CHECK_THROWS_AS(a.slice_rows(3, 2), InternalError);
}

TEST_CASE("devices parse from their names and bad names are config errors") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda:1") == Device::cuda(1));
  CHECK(Device::parse("gpu") == Device::cuda(0));
  CHECK(Device::parse("cuda:1").str() == "cuda:1");
  CHECK_THROWS_AS(Device::parse("tpu"), ConfigError);
  CHECK_THROWS_AS(Device::parse("cuda:x"), ConfigError);
}
