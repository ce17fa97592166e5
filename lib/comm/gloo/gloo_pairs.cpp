// GlooPairs (gloo_pairs.h): a Gloo context whose pairs are connected a round at
// a time through dtrain's store.
#include "comm/gloo/gloo_pairs.h"

#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "rendezvous/store.h"

namespace dtrain::comm {

std::vector<int> gloo_neighbours(int rank, int size) {
  std::set<int> peers;
  for (int64_t step = 1; step < size; step *= 2) {
    peers.insert(static_cast<int>((rank + step) % size));
    peers.insert(static_cast<int>((rank - step % size + size) % size));
  }
  peers.erase(rank);
  return {peers.begin(), peers.end()};
}

std::vector<int> all_other_ranks(int rank, int size) {
  std::vector<int> peers;
  for (int r = 0; r < size; ++r)
    if (r != rank) peers.push_back(r);
  return peers;
}

namespace {

// A gloo::Context whose transport context exists from the start and whose pairs
// are made one by one (Gloo's own contexts make them all in connectFullMesh).
class PairContext final : public gloo::Context {
 public:
  PairContext(int rank, int size, std::shared_ptr<gloo::transport::Device> device, std::chrono::milliseconds timeout)
      : gloo::Context(rank, size) {
    setTimeout(timeout);
    device_ = std::move(device);
    transportContext_ = device_->createContext(rank, size);
    transportContext_->setTimeout(timeout);
  }

  gloo::transport::Pair& create_pair(int peer) { return *transportContext_->createPair(peer); }
};

// A round's store value: for each peer, its rank (4 bytes), the address's length
// (4 bytes) and the address (Gloo's bytes), little-endian.
void append_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t read_u32(const std::string& in, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

// The address that `value` (rank `from`'s) holds for rank `to`.
std::vector<char> address_for(const std::string& value, int from, int to, const std::string& key) {
  for (size_t at = 0; at + 8 <= value.size();) {
    const uint32_t peer = read_u32(value, at), length = read_u32(value, at + 4);
    at += 8;
    DT_CHECK(at + length <= value.size(), "store value '", key, "' of rank ", from, " is cut short");
    if (static_cast<int>(peer) == to) return std::vector<char>(value.begin() + at, value.begin() + at + length);
    at += length;
  }
  throw CommError(str("rank ", from, " published no Gloo address for rank ", to, " under '", key,
                      "' (the ranks disagree on which pairs to connect)"));
}

// Every GlooPairs of this process adds the pairs it connects.
std::atomic<int64_t> g_pairs_connected{0};

std::chrono::milliseconds to_millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

}  // namespace

GlooPairs::GlooPairs(rendezvous::Store& store, std::shared_ptr<gloo::transport::Device> device, Options options)
    : store_(store),
      options_(std::move(options)),
      context_(std::make_shared<PairContext>(options_.rank, options_.size, std::move(device),
                                             to_millis(options_.timeout_seconds))),
      connected_(static_cast<size_t>(options_.size), false) {}

GlooPairs::~GlooPairs() = default;

std::shared_ptr<gloo::Context> GlooPairs::context() const { return context_; }

bool GlooPairs::connected(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return connected_.at(static_cast<size_t>(peer));
}

int GlooPairs::pairs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(std::count(connected_.begin(), connected_.end(), true));
}

void GlooPairs::wait_for(const std::vector<std::string>& keys, const std::vector<int>& ranks, const char* did_not) {
  if (store_.wait(keys, options_.timeout_seconds)) return;
  std::vector<std::string> missing;
  const auto values = store_.get_many(keys);
  for (size_t i = 0; i < keys.size(); ++i)
    if (!values[i]) missing.push_back(std::to_string(ranks[i]));
  if (missing.empty()) return;  // arrived just after the deadline
  throw TimeoutError(str(options_.name, ": ", missing.size() == 1 ? "rank " : "ranks ", join(missing, ", "),
                         " ", did_not, " within ", options_.timeout_seconds, " s (store keys under '",
                         options_.prefix, "')"));
}

void GlooPairs::connect_round(const std::vector<int>& peers) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& context = static_cast<PairContext&>(*context_);
  const std::string round = str(options_.prefix, "pairs", rounds_++, "/");
  std::vector<int> fresh;  // in increasing order (see the top of gloo_pairs.h)
  for (int p : peers)
    if (!connected_.at(static_cast<size_t>(p))) fresh.push_back(p);
  std::sort(fresh.begin(), fresh.end());
  std::string mine;
  for (int p : fresh) {
    const std::vector<char> address = context.create_pair(p).address().bytes();
    append_u32(mine, static_cast<uint32_t>(p));
    append_u32(mine, static_cast<uint32_t>(address.size()));
    mine.append(address.begin(), address.end());
  }
  store_.set(str(round, options_.rank), mine);
  std::vector<std::string> keys;
  for (int p : fresh) keys.push_back(str(round, p));
  wait_for(keys, fresh, "did not join");
  const auto values = store_.get_many(keys);
  for (size_t i = 0; i < fresh.size(); ++i) {
    DT_CHECK(values[i].has_value(), "the key '", keys[i], "' vanished from the store");
    context.getPair(fresh[i])->connect(address_for(*values[i], fresh[i], options_.rank, keys[i]));
    connected_[static_cast<size_t>(fresh[i])] = true;
  }
  g_pairs_connected += static_cast<int64_t>(fresh.size());
}

void GlooPairs::connect_one(int peer) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (connected_.at(static_cast<size_t>(peer))) return;
  auto& context = static_cast<PairContext&>(*context_);
  const std::vector<char> address = context.create_pair(peer).address().bytes();
  store_.set(str(options_.prefix, "pair/", options_.rank, "/", peer), std::string(address.begin(), address.end()));
  const std::string theirs = str(options_.prefix, "pair/", peer, "/", options_.rank);
  wait_for({theirs}, {peer}, "made no send or recv to this rank");
  const std::optional<std::string> value = store_.get(theirs);
  DT_CHECK(value.has_value(), "the key '", theirs, "' vanished from the store");
  context.getPair(peer)->connect(std::vector<char>(value->begin(), value->end()));
  connected_[static_cast<size_t>(peer)] = true;
  ++g_pairs_connected;
}

int64_t gloo_pairs_connected() { return g_pairs_connected.load(); }

}  // namespace dtrain::comm
