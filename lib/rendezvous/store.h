// Store: the small key-value interface that tasks (and the collectives' own
// rendezvous, Gloo's and later NCCL's) meet through, as Gloo's and c10d's stores.
//
// Every call has a deadline: set/get/add are single requests (the implementation's
// request deadline), wait() takes its own. Values are bytes in a std::string.
// Implementations: StoreClient (TCP to the chief's StoreServer, the job's store)
// and InMemoryStore (threads of one process: unit tests of comm and strategies,
// no sockets). PrefixStore puts a namespace in front of every key, so that each
// user of a job's store has its own keys.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::rendezvous {

class Store {
 public:
  virtual ~Store() = default;
  // Sets `key` to `value` (overwriting).
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value at `key`, or nullopt when absent. Does not wait.
  virtual std::optional<std::string> get(const std::string& key) = 0;
  // Adds delta to the integer at key (0 if absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Blocks until every key exists (true) or timeout_seconds pass (false).
  virtual bool wait(const std::vector<std::string>& keys, double timeout_seconds) = 0;
  // The values at `keys` (nullopt where absent), in order. Here one get() per
  // key; the TCP store answers many keys per request.
  virtual std::vector<std::optional<std::string>> get_many(const std::vector<std::string>& keys);
};

// A Store in this process's memory, safe to share between threads.
class InMemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool wait(const std::vector<std::string>& keys, double timeout_seconds) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

// Every key of `base` under `prefix` ("comm/workers/" + key). `base` must outlive it.
class PrefixStore final : public Store {
 public:
  PrefixStore(Store& base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {}
  const std::string& prefix() const { return prefix_; }
  void set(const std::string& key, const std::string& value) override { base_.set(prefix_ + key, value); }
  std::optional<std::string> get(const std::string& key) override { return base_.get(prefix_ + key); }
  int64_t add(const std::string& key, int64_t delta) override { return base_.add(prefix_ + key, delta); }
  bool wait(const std::vector<std::string>& keys, double timeout_seconds) override;

 private:
  Store& base_;
  std::string prefix_;
};

}  // namespace dtrain::rendezvous
