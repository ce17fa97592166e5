// Implementation of store.h: the in-memory store and the prefix view.
#include "rendezvous/store.h"

#include <chrono>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::rendezvous {

void InMemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

std::vector<std::optional<std::string>> Store::get_many(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(get(k));
  return values;
}

std::optional<std::string> InMemoryStore::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

int64_t InMemoryStore::add(const std::string& key, int64_t delta) {
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string& value = values_[key];
    int64_t current = 0;
    if (!value.empty()) {
      size_t used = 0;
      try {
        current = std::stoll(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != value.size())
        throw RuntimeError(str("store: add on key '", key, "' whose value is not an integer"));
    }
    result = current + delta;
    value = std::to_string(result);
  }
  changed_.notify_all();
  return result;
}

bool InMemoryStore::wait(const std::vector<std::string>& keys, double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto all_there = [&] {
    for (const auto& k : keys)
      if (!values_.count(k)) return false;
    return true;
  };
  return changed_.wait_for(lock, std::chrono::duration<double>(std::max(timeout_seconds, 0.0)), all_there);
}

bool PrefixStore::wait(const std::vector<std::string>& keys, double timeout_seconds) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(prefix_ + k);
  return base_.wait(full, timeout_seconds);
}

}  // namespace dtrain::rendezvous
