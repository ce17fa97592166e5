// MemoryScope: counts the bytes of the tensors allocated on one thread while it
// is active, from their allocation until their storage is freed (on whatever
// thread drops the last reference). A measurement of what dtrain's own tensors
// hold, not of the allocator: oneDNN's scratch memory, std::vector buffers and
// the allocator's caches are not in it. Bytes are the allocations' (rounded up
// to 64), per device type (the host, a GPU).
//
// A pipeline stage counts its training steps this way: the activations its
// layers keep, the micro-batch inputs it holds, the messages in flight, the
// input gradients and the ops' temporary tensors (its parameters, gradients and
// optimizer state are allocated before, outside the scope).
//
//   MemoryScope scope;
//   { MemoryScope::Active on(scope); ... train ... }
//   scope.peak(DeviceType::kCpu);
#pragma once

#include <cstdint>
#include <memory>

#include "tensor/device.h"

namespace dtrain {

class MemoryScope {
 public:
  MemoryScope();

  // Bytes of this scope's tensors alive now / the most alive at once since the
  // scope began or since reset_peak().
  int64_t live(DeviceType type) const;
  int64_t peak(DeviceType type) const;
  // The peak becomes the bytes alive now.
  void reset_peak();

  // While it exists, tensors allocated on this thread count in `scope` (scopes
  // nest: the innermost counts).
  class Active {
   public:
    explicit Active(MemoryScope& scope);
    ~Active();
    Active(const Active&) = delete;
    Active& operator=(const Active&) = delete;

   private:
    void* previous_;
  };

  struct Counters;  // tensor/memory_scope.cpp; shared with the tensors' storage

 private:
  std::shared_ptr<Counters> counters_;
};

namespace memory_scope_detail {
// For Tensor's allocation: the active scope's counters on this thread (or null),
// and the accounting of `bytes` on `type` allocated / freed in them.
std::shared_ptr<MemoryScope::Counters> active_counters();
void allocated(MemoryScope::Counters& counters, DeviceType type, int64_t bytes);
void freed(MemoryScope::Counters& counters, DeviceType type, int64_t bytes);
}  // namespace memory_scope_detail

}  // namespace dtrain
