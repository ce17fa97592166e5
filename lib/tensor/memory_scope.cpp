// Implementation of memory_scope.h: atomic counters per device type, shared by
// the scope and the deleters of the tensors allocated in it.
#include "tensor/memory_scope.h"

#include <atomic>

namespace dtrain {

struct MemoryScope::Counters {
  std::atomic<int64_t> live[2] = {0, 0};
  std::atomic<int64_t> peak[2] = {0, 0};
};

namespace {

thread_local std::shared_ptr<MemoryScope::Counters>* t_active = nullptr;

int index_of(DeviceType type) { return type == DeviceType::kCpu ? 0 : 1; }

}  // namespace

MemoryScope::MemoryScope() : counters_(std::make_shared<Counters>()) {}

int64_t MemoryScope::live(DeviceType type) const { return counters_->live[index_of(type)].load(); }
int64_t MemoryScope::peak(DeviceType type) const { return counters_->peak[index_of(type)].load(); }

void MemoryScope::reset_peak() {
  for (int i = 0; i < 2; ++i) counters_->peak[i].store(counters_->live[i].load());
}

MemoryScope::Active::Active(MemoryScope& scope) : previous_(t_active) { t_active = &scope.counters_; }
MemoryScope::Active::~Active() { t_active = static_cast<std::shared_ptr<Counters>*>(previous_); }

namespace memory_scope_detail {

std::shared_ptr<MemoryScope::Counters> active_counters() { return t_active ? *t_active : nullptr; }

void allocated(MemoryScope::Counters& counters, DeviceType type, int64_t bytes) {
  const int i = index_of(type);
  const int64_t now = counters.live[i].fetch_add(bytes) + bytes;
  int64_t peak = counters.peak[i].load();
  while (now > peak && !counters.peak[i].compare_exchange_weak(peak, now)) {
  }
}

void freed(MemoryScope::Counters& counters, DeviceType type, int64_t bytes) {
  counters.live[index_of(type)].fetch_sub(bytes);
}

}  // namespace memory_scope_detail
}  // namespace dtrain
