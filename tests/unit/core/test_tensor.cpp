// tensor: storage sharing, reshapes, row slices, clones, device names, memory scopes.
#include <catch2/catch.hpp>
#include <thread>

#include "core/error.h"
#include "tensor/memory_scope.h"
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

TEST_CASE("a memory scope counts the tensors allocated while it is active, until they are freed anywhere") {
  MemoryScope scope;
  Tensor outside({1000});  // before the scope: not counted
  Tensor kept;
  {
    const MemoryScope::Active on(scope);
    Tensor a({16});           // 64 bytes
    kept = Tensor({100});     // 400 bytes, rounded up to 448
    const Tensor view = kept.slice_rows(0, 10);  // shares storage: nothing new
    CHECK(scope.live(DeviceType::kCpu) == 64 + 448);
    {
      MemoryScope inner;
      const MemoryScope::Active nested(inner);
      Tensor b({32});  // counted in the innermost scope only
      CHECK(inner.live(DeviceType::kCpu) == 128);
      CHECK(scope.live(DeviceType::kCpu) == 64 + 448);
    }
    Tensor c = outside.clone();  // 4000 bytes, rounded to 4032
    CHECK(scope.peak(DeviceType::kCpu) == 64 + 448 + 4032);
  }
  // a and c are gone; `kept` lives on, and is freed on another thread later.
  CHECK(scope.live(DeviceType::kCpu) == 448);
  CHECK(scope.peak(DeviceType::kCpu) == 64 + 448 + 4032);
  CHECK(scope.live(DeviceType::kCuda) == 0);
  scope.reset_peak();
  CHECK(scope.peak(DeviceType::kCpu) == 448);
  std::thread([moved = std::move(kept)]() mutable { moved = Tensor(); }).join();
  CHECK(scope.live(DeviceType::kCpu) == 0);
  Tensor after({10});  // no scope active any more
  CHECK(scope.live(DeviceType::kCpu) == 0);
}
