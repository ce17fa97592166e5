// Implementation of shm_communicator.h.
#include "comm/shm/shm_communicator.h"
#include "comm/reduction.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <map>
#include <new>
#include <span>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "rendezvous/store.h"

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x64747368;  // "dtsh"
constexpr size_t kHeaderBytes = 4096;

// Members whose all-reduce sizes are compared (check_counts).
constexpr int kCountedMembers = 256;

// The segment's first page. The atomics are lock-free and address-free, so they
// work between processes that map the segment at different addresses.
struct Header {
  uint32_t magic;
  int32_t size;
  uint64_t capacity;                 // floats per slot
  std::atomic<uint32_t> arrived;     // members in the current barrier
  std::atomic<uint32_t> generation;  // barriers completed (the futex word)
  std::atomic<uint32_t> broken;      // a member failed or left: every wait ends
  // Each member's element count of the all-reduce it is in (the first
  // kCountedMembers members'): compared after the collective's first barrier.
  std::atomic<uint64_t> counts[kCountedMembers];
};
static_assert(sizeof(Header) <= kHeaderBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// How long a barrier spins before it sleeps on the futex. Waking a sleeper took
// tens of microseconds on a 2-core VM: `bench allreduce --workers 2
// --communication hierarchical` moved 64 KiB in 34 us without the spin and 4.5
// us with it, 1 MiB in 98 against 62 us; spins of 10, 30 and 100 us did alike.
constexpr auto kSpinTime = std::chrono::microseconds(20);

// Room after each member's shared area for the few values of a collective that
// lie outside it (a step's loss sums and flags, riding along with the gradients).
constexpr size_t kSpillFloats = 64;

// What member 0 publishes instead of a segment's name when it could not make
// the shared area.
constexpr const char* kNoArea = "none";

// How often a wait that lasts asks the heartbeats whether a member was lost.
constexpr auto kPeerPoll = std::chrono::milliseconds(50);

// A hint to the CPU that this thread spins (it frees the core's resources).
inline void pause_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, Clock::duration timeout) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  // Not FUTEX_PRIVATE: the word is shared between processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// all_gather and reduce_scatter of a communicator made of its all_reduce: every
// member's part in its place and zeros elsewhere (so the sum is exact), or the
// whole reduction and this member's slice of it.
void gather_by_all_reduce(Communicator& c, const float* in, size_t count, float* out) {
  std::fill(out, out + count * c.size(), 0.0f);
  std::copy_n(in, count, out + count * c.rank());  // (not memcpy: count 0 may come with null pointers)
  c.all_reduce(out, count * c.size(), ReduceOp::kSum);
}

void scatter_by_all_reduce(Communicator& c, const float* in, size_t count_per_rank, float* out, ReduceOp op) {
  std::vector<float> all(in, in + count_per_rank * c.size());
  c.all_reduce(all.data(), all.size(), op);
  std::copy_n(all.data() + count_per_rank * c.rank(), count_per_rank, out);
}

// The name of a job's segment for a group's `what` ("" for the group's own,
// "area" for its shared area): the same on every member, short enough for
// /dev/shm, and another job's never.
std::string segment_name(const ShmOptions& o, const std::string& what) {
  return "/dtrain-" + sha256_hex(o.job_id + "|" + o.prefix + what).substr(0, 24);
}

// Maps `bytes` of the open segment fd (and closes fd).
char* map_segment(int fd, const std::string& name, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  close(fd);
  if (p == MAP_FAILED) throw IoError(str("cannot map shared memory ", name, ": ", std::strerror(e)));
  return static_cast<char*>(p);
}

// Makes the segment `name`, `bytes` long and zero-filled (after removing one a
// crashed run of the same job left), and maps it.
char* create_segment(const std::string& name, size_t bytes) {
  shm_unlink(name.c_str());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw IoError(str("cannot create shared memory ", name, " in /dev/shm: ", std::strerror(errno)));
  // The pages reserved now (posix_fallocate), not when first written: a full
  // /dev/shm is this error here rather than a SIGBUS in the middle of a step.
  int e = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (e == 0) e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (e != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw IoError(str("cannot size shared memory ", name, " to ", bytes, " bytes: ", std::strerror(e),
                      " (is /dev/shm large enough?)"));
  }
  return map_segment(fd, name, bytes);
}

// Maps the existing segment `name`, which must be `bytes` long.
char* attach_segment(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) throw IoError(str("cannot open shared memory ", name, ": ", std::strerror(errno)));
  struct stat st{};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    throw CommError(str("shared memory ", name, " has another size than this group needs: another job?"));
  }
  return map_segment(fd, name, bytes);
}

// Walks the pieces of all_reduce_pieces as one buffer: the next n values of
// the pieces to a slot, or from the result area into the pieces.
class PieceCursor {
 public:
  explicit PieceCursor(std::span<const Piece> pieces) : pieces_(pieces) {}

  void gather(float* to, size_t n) {
    walk(n, [&](float* piece, size_t k) {
      std::memcpy(to, piece, k * sizeof(float));
      to += k;
    });
  }
  void scatter(const float* from, size_t n) {
    walk(n, [&](float* piece, size_t k) {
      std::memcpy(piece, from, k * sizeof(float));
      from += k;
    });
  }

 private:
  // Calls copy(pointer into the current piece, how many) until n values are covered.
  template <class F>
  void walk(size_t n, F copy) {
    while (n > 0) {
      DT_CHECK(index_ < pieces_.size(), "more values asked of the pieces than they hold");
      const Piece& p = pieces_[index_];
      const size_t k = std::min(n, p.count - offset_);
      if (k > 0) copy(p.data + offset_, k);
      n -= k;
      offset_ += k;
      if (offset_ == p.count) {
        ++index_;
        offset_ = 0;
      }
    }
  }

  std::span<const Piece> pieces_;
  size_t index_ = 0;   // the piece the next value is in
  size_t offset_ = 0;  // and its place in that piece
};

class ShmCommunicator : public Communicator {
 public:
  ShmCommunicator(rendezvous::Store& store, const ShmOptions& o) : options_(o), store_(store) {
    if (o.size < 1 || o.rank < 0 || o.rank >= o.size)
      throw ConfigError(str("shared-memory group: rank ", o.rank, " outside 0..", o.size - 1));
    DT_CHECK(o.capacity_floats > 0, "a shared-memory slot needs room");
    timeout_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_seconds));
    if (o.size == 1) return;  // a group of one needs no segment
    bytes_ = kHeaderBytes + (static_cast<size_t>(o.size) + 1) * o.capacity_floats * sizeof(float);
    const std::string name = segment_name(o, "");
    const std::string key = o.prefix + "shm_segment";
    if (o.rank == 0) {
      create(name);
      store.set(key, name);
    } else {
      if (!store.wait({key}, o.timeout_seconds))
        throw TimeoutError(str("shared-memory group ", o.prefix, ": its first member did not create the segment "
                               "within ", o.timeout_seconds, " s"));
      attach(store.get(key).value_or(name));
    }
    try {
      barrier();  // every member has mapped it
    } catch (...) {
      if (o.rank == 0) shm_unlink(name.c_str());
      leave();
      throw;
    }
    if (o.rank == 0) shm_unlink(name.c_str());  // the name can go: nothing is left in /dev/shm
  }

  ~ShmCommunicator() override { leave(); }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  void all_reduce(float* data, size_t count, ReduceOp op) override {
    const Piece whole{data, count};
    all_reduce_pieces({&whole, 1}, op);
  }

  // Two barriers a chunk. Slots are read only between a collective's two
  // barriers and the result area only after its last one, so a member may write
  // its slot for the next chunk (or collective) at once: the others may still be
  // reading the result, but nobody writes the result before the next barrier,
  // which they reach only once they have copied it out. The pieces are copied
  // straight into the slot and the result straight back into them.
  void all_reduce_pieces(std::span<const Piece> pieces, ReduceOp op) override {
    if (options_.size == 1) return;  // the sum and the mean of one member are its values
    size_t count = 0;
    for (const Piece& p : pieces) count += p.count;
    publish_count(count);
    if (area_ && reduce_in_area(pieces, op, count)) return;
    const size_t cap = options_.capacity_floats;
    PieceCursor to_slot(pieces), from_result(pieces);
    std::vector<const float*> inputs(static_cast<size_t>(options_.size));
    for (size_t off = 0; off < count; off += cap) {
      const size_t n = std::min(cap, count - off);
      to_slot.gather(slot(options_.rank), n);
      barrier();  // every slot written, every member done with the last result
      if (off == 0) check_counts(count);
      // This member's share of the elements, summed over the slots in rank order
      // (and divided here, while it is in the cache, for a mean).
      const size_t lo = n * options_.rank / options_.size, hi = n * (options_.rank + 1) / options_.size;
      for (int r = 0; r < options_.size; ++r) inputs[static_cast<size_t>(r)] = slot(r) + lo;
      sum_in_rank_order(inputs.data(), options_.size, hi - lo, result() + lo);
      if (op == ReduceOp::kMean) divide_by_size(result() + lo, hi - lo, options_.size);
      barrier();  // the whole result written, every slot read
      from_result.scatter(result(), n);
    }
  }
  bool reduces_pieces_in_place() const override { return true; }

  // A second segment, made by member 0 and published in the store like the
  // group's own: one area per member, each padded to whole cache lines.
  std::shared_ptr<float> shared_area(size_t floats) override {
    if (options_.size == 1) return nullptr;  // nothing to share with
    if (area_) {
      // Asked again (a strategy made anew on the same group): the same area,
      // zero-filled again, if it is the same size; else none.
      if (floats != area_floats_) return nullptr;
      std::fill(area(options_.rank), area(options_.rank) + area_stride_, 0.0f);
      return std::shared_ptr<float>(area_, area(options_.rank));
    }
    area_stride_ = (floats + kSpillFloats + 63) / 64 * 64;
    const size_t bytes = area_stride_ * static_cast<size_t>(options_.size) * sizeof(float);
    const std::string name = segment_name(options_, "area");
    const std::string key = options_.prefix + "shm_area";
    char* p = nullptr;
    if (options_.rank == 0) {
      try {
        p = create_segment(name, bytes);
      } catch (const IoError& e) {
        // No room in /dev/shm: every member goes on without an area (the
        // collectives copy through the slots, as without one).
        log::warn("comm: no shared area of ", bytes, " bytes for ", options_.prefix, ": ", e.what(),
                  "; the all-reduce copies through its slots instead");
        store_.set(key, kNoArea);
        return nullptr;
      }
      store_.set(key, name);
    } else {
      if (!store_.wait({key}, options_.timeout_seconds))
        throw TimeoutError(str("shared-memory group ", options_.prefix, ": its first member did not create the "
                               "shared area within ", options_.timeout_seconds, " s"));
      const std::string published = store_.get(key).value_or(name);
      if (published == kNoArea) return nullptr;
      p = attach_segment(published, bytes);
    }
    area_ = std::shared_ptr<char>(p, [bytes](char* q) { munmap(q, bytes); });
    area_floats_ = floats;
    try {
      barrier();  // every member has mapped it
    } catch (...) {
      if (options_.rank == 0) shm_unlink(name.c_str());
      throw;
    }
    if (options_.rank == 0) shm_unlink(name.c_str());
    return std::shared_ptr<float>(area_, area(options_.rank));
  }

  // The root's values go through its slot (not the result area, which the
  // others may still be reading after an all_reduce).
  void broadcast(float* data, size_t count, int root) override {
    DT_CHECK(root >= 0 && root < options_.size, "broadcast root ", root, " outside the group");
    if (options_.size == 1) return;
    const size_t cap = options_.capacity_floats;
    for (size_t off = 0; off < count; off += cap) {
      const size_t n = std::min(cap, count - off);
      if (options_.rank == root) std::memcpy(slot(root), data + off, n * sizeof(float));
      barrier();
      if (options_.rank != root) std::memcpy(data + off, slot(root), n * sizeof(float));
      barrier();  // the root's slot read before anyone writes a slot again
    }
  }

  // Each member's part through its slot, read by all between two barriers (as
  // an all-reduce's slots): a member writes `count` floats and reads size x count.
  void all_gather(const float* in, size_t count, float* out) override {
    if (options_.size == 1) return (void)std::copy_n(in, count, out);
    publish_count(count);
    const size_t cap = options_.capacity_floats;
    for (size_t off = 0; off < count; off += cap) {
      const size_t n = std::min(cap, count - off);
      std::memcpy(slot(options_.rank), in + off, n * sizeof(float));
      barrier();  // every part written
      if (off == 0) check_counts(count);
      for (int r = 0; r < options_.size; ++r)
        std::memcpy(out + static_cast<size_t>(r) * count + off, slot(r), n * sizeof(float));
      barrier();  // every part read before a slot is written again
    }
  }

  // In rounds of `cap / size` floats of each member's part: every member writes
  // its values of every part into its slot, then sums its own part over the
  // slots in rank order (the all-reduce's order: the same floats).
  void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) override {
    if (options_.size == 1) {
      std::copy_n(in, count_per_rank, out);
      return;
    }
    const size_t size = static_cast<size_t>(options_.size);
    // (a slot must hold a value of every part: else made of the all-reduce)
    if (options_.capacity_floats < size) return scatter_by_all_reduce(*this, in, count_per_rank, out, op);
    publish_count(count_per_rank);
    const size_t round = std::max<size_t>(1, options_.capacity_floats / size);
    std::vector<const float*> inputs(size);
    for (size_t off = 0; off < count_per_rank; off += round) {
      const size_t n = std::min(round, count_per_rank - off);
      for (size_t r = 0; r < size; ++r)
        std::memcpy(slot(options_.rank) + r * n, in + r * count_per_rank + off, n * sizeof(float));
      barrier();  // every member's values in its slot
      if (off == 0) check_counts(count_per_rank);
      for (size_t r = 0; r < size; ++r) inputs[r] = slot(static_cast<int>(r)) + static_cast<size_t>(options_.rank) * n;
      sum_in_rank_order(inputs.data(), options_.size, n, out + off);
      if (op == ReduceOp::kMean) divide_by_size(out + off, n, options_.size);
      barrier();  // every slot read before it is written again
    }
  }

  void barrier() override {
    if (options_.size == 1) return;
    Header& h = *header_;
    if (h.broken.load()) throw PeerLost(str("shared-memory group ", options_.prefix, ": a member left or failed"));
    const uint32_t generation = h.generation.load(std::memory_order_acquire);
    if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(options_.size)) {
      h.arrived.store(0, std::memory_order_relaxed);
      h.generation.fetch_add(1, std::memory_order_release);
      futex_wake_all(&h.generation);
      return;
    }
    const auto now = Clock::now();
    const auto deadline = now + timeout_;
    // Spin a little first: the others are often a few microseconds away, and a
    // futex wake costs tens of microseconds on a virtual machine.
    const auto spin_until = now + kSpinTime;
    auto next_poll = now + kPeerPoll;
    while (h.generation.load(std::memory_order_acquire) == generation && Clock::now() < spin_until) pause_cpu();
    while (h.generation.load(std::memory_order_acquire) == generation) {
      if (h.broken.load())
        throw PeerLost(str("shared-memory group ", options_.prefix, ": a member left or failed"));
      const auto now = Clock::now();
      if (now >= deadline) {
        h.broken.store(1);  // the others must not wait for us any more either
        futex_wake_all(&h.generation);
        throw TimeoutError(str("shared-memory group ", options_.prefix, ": rank ", options_.rank, " waited ",
                               options_.timeout_seconds, " s for the other members of this machine"));
      }
      if (options_.peer_lost && now >= next_poll) {
        if (std::optional<std::string> lost = options_.peer_lost()) {
          h.broken.store(1);
          futex_wake_all(&h.generation);
          throw PeerLost(str(*lost, " (shared-memory group ", options_.prefix, ")"));
        }
        next_poll = now + kPeerPoll;
      }
      futex_wait(&h.generation, generation, std::min<Clock::duration>(deadline - now, kPeerPoll));
    }
  }

 private:
  // Leaving ends the group: a member still waiting gets PeerLost, not a hang.
  void leave() {
    if (!header_) return;
    header_->broken.store(1);
    futex_wake_all(&header_->generation);
    munmap(base_, bytes_);
    header_ = nullptr;
  }

  void create(const std::string& name) {
    base_ = create_segment(name, bytes_);
    header_ = new (base_) Header{kMagic, options_.size, options_.capacity_floats, {0}, {0}, {0}, {}};
  }

  void attach(const std::string& name) {
    base_ = attach_segment(name, bytes_);
    header_ = reinterpret_cast<Header*>(base_);
    if (header_->magic != kMagic || header_->size != options_.size || header_->capacity != options_.capacity_floats)
      throw CommError(str("shared memory ", name, " was made for another group"));
  }

  // Before an all-reduce's first barrier: this member's element count. A member
  // writes the next one only after the collective's last barrier, which the
  // others pass only once they compared this one.
  void publish_count(size_t count) {
    if (options_.rank < kCountedMembers) header_->counts[options_.rank].store(count, std::memory_order_relaxed);
  }

  // After the first barrier: CommError when a member's count differs from this
  // one's (the tasks' bucket sizes or their sequences of collectives differ),
  // instead of reducing mismatched buffers. Every member finds it at the same
  // barrier; the group is broken from then on.
  void check_counts(size_t count) {
    for (int r = 0; r < std::min(options_.size, kCountedMembers); ++r) {
      const uint64_t theirs = header_->counts[r].load(std::memory_order_relaxed);
      if (theirs == count) continue;
      header_->broken.store(1);
      futex_wake_all(&header_->generation);
      throw CommError(str("shared-memory group ", options_.prefix, ": the members disagree on an all-reduce's size: ",
                          "member ", r, " has ", theirs, " values, member ", options_.rank, " (this task) ", count,
                          " (their bucket sizes or their sequences of collectives differ)"));
    }
  }

  // The pieces reduced where they lie in this member's shared area; the few
  // values outside it (a step's loss sums riding along) through the spill room
  // after it. False, with nothing done, when those do not fit there.
  bool reduce_in_area(std::span<const Piece> pieces, ReduceOp op, size_t total) {
    float* mine = area(options_.rank);
    std::vector<size_t> at(pieces.size());  // each piece's place in the area
    size_t spill = 0, count = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      if (p.count > 0 && p.data >= mine && p.data + p.count <= mine + area_floats_) {
        at[i] = static_cast<size_t>(p.data - mine);
      } else {
        at[i] = area_floats_ + spill;
        spill += p.count;
      }
      count += p.count;
    }
    if (spill > kSpillFloats) return false;
    // Copied through the spill room. Not an empty piece: its data may be null, and
    // memcpy from or to null is undefined even for 0 bytes.
    auto outside = [&](size_t i) { return at[i] >= area_floats_ && pieces[i].count > 0; };
    for (size_t i = 0; i < pieces.size(); ++i)
      if (outside(i)) std::memcpy(mine + at[i], pieces[i].data, pieces[i].count * sizeof(float));
    barrier();  // every member's values in its area
    check_counts(total);
    // This member's share of the pieces' elements, in their order.
    const size_t lo = count * options_.rank / options_.size, hi = count * (options_.rank + 1) / options_.size;
    size_t begin = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const size_t end = begin + pieces[i].count;
      const size_t a = std::max(begin, lo), b = std::min(end, hi);
      if (a < b) reduce_area_range(at[i] + (a - begin), b - a, op);
      begin = end;
    }
    barrier();  // every share written into every area
    for (size_t i = 0; i < pieces.size(); ++i)
      if (outside(i)) std::memcpy(pieces[i].data, mine + at[i], pieces[i].count * sizeof(float));
    return true;
  }

  // Elements [off, off + n) of the areas: summed over the members in rank order
  // into member 0's area (a mean divided there) and copied to the others', in
  // blocks that stay in the cache between the sum and the copies.
  void reduce_area_range(size_t off, size_t n, ReduceOp op) {
    constexpr size_t kBlock = 4096;
    std::vector<const float*> inputs(static_cast<size_t>(options_.size));
    for (size_t b = 0; b < n; b += kBlock) {
      const size_t k = std::min(kBlock, n - b);
      for (int r = 0; r < options_.size; ++r) inputs[static_cast<size_t>(r)] = area(r) + off + b;
      float* out = area(0) + off + b;
      sum_in_rank_order(inputs.data(), options_.size, k, out);
      if (op == ReduceOp::kMean) divide_by_size(out, k, options_.size);
      for (int r = 1; r < options_.size; ++r) std::memcpy(area(r) + off + b, out, k * sizeof(float));
    }
  }

  float* area(int r) {
    return reinterpret_cast<float*>(area_.get()) + static_cast<size_t>(r) * area_stride_;
  }

  float* slot(int r) {
    return reinterpret_cast<float*>(base_ + kHeaderBytes) + static_cast<size_t>(r) * options_.capacity_floats;
  }
  float* result() { return slot(options_.size); }

  ShmOptions options_;
  rendezvous::Store& store_;  // the job's: shared_area publishes its segment there
  Clock::duration timeout_{};
  size_t bytes_ = 0;
  char* base_ = nullptr;
  Header* header_ = nullptr;
  // shared_area(): the members' areas, area_stride_ floats apart, each
  // area_floats_ long plus kSpillFloats of spill room.
  std::shared_ptr<char> area_;
  size_t area_floats_ = 0, area_stride_ = 0;
};

class HierarchicalCommunicator : public Communicator {
 public:
  HierarchicalCommunicator(int rank, HostLayout layout, std::unique_ptr<Communicator> local,
                           std::unique_ptr<Communicator> leaders)
      : rank_(rank), layout_(std::move(layout)), local_(std::move(local)), leaders_(std::move(leaders)) {
    DT_CHECK(rank_ >= 0 && static_cast<size_t>(rank_) < layout_.host_of.size(), "rank outside the layout");
    DT_CHECK((layout_.local_rank_of[rank_] == 0) == (leaders_ != nullptr), "leaders group on the leaders only");
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(layout_.host_of.size()); }

  void all_reduce(float* data, size_t count, ReduceOp op) override { reduce(data, count, op, false); }
  // One machine: the pieces go to shared memory where they lie. Several: through
  // one buffer (the leaders' Gloo all-reduce takes one).
  void all_reduce_pieces(std::span<const Piece> pieces, ReduceOp op) override {
    if (layout_.hosts() == 1) return local_->all_reduce_pieces(pieces, op);
    Communicator::all_reduce_pieces(pieces, op);
  }
  bool reduces_pieces_in_place() const override {
    return layout_.hosts() == 1 && local_->reduces_pieces_in_place();
  }
  // One machine: the shared memory's (several: the leaders' exchange goes through
  // one buffer anyway).
  std::shared_ptr<float> shared_area(size_t floats) override {
    return layout_.hosts() == 1 ? local_->shared_area(floats) : nullptr;
  }
  // In the machine the values are summed in float32 (shared memory costs no
  // bytes on a wire); only the leaders' exchange travels as bfloat16.
  void all_reduce_bfloat16(float* data, size_t count, ReduceOp op) override {
    round_to_bfloat16(data, count);
    reduce(data, count, op, true);
  }

  void broadcast(float* data, size_t count, int root) override {
    DT_CHECK(root >= 0 && root < size(), "broadcast root ", root, " outside the group");
    const int root_host = layout_.host_of[root];
    const bool mine = layout_.host_of[rank_] == root_host;
    if (mine) local_->broadcast(data, count, layout_.local_rank_of[root]);  // to the root's machine
    if (leaders_) leaders_->broadcast(data, count, root_host);              // to the other leaders
    if (!mine) local_->broadcast(data, count, 0);                           // to their machines
  }

  // One machine: the shared memory's own (its ranks are the group's). Several:
  // made of the all-reduce.
  void all_gather(const float* in, size_t count, float* out) override {
    if (layout_.hosts() == 1) return local_->all_gather(in, count, out);
    gather_by_all_reduce(*this, in, count, out);
  }
  void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) override {
    if (layout_.hosts() == 1) return local_->reduce_scatter(in, count_per_rank, out, op);
    scatter_by_all_reduce(*this, in, count_per_rank, out, op);
  }

  void barrier() override {
    local_->barrier();
    if (leaders_) leaders_->barrier();
    local_->barrier();
  }

 private:
  void reduce(float* data, size_t count, ReduceOp op, bool bfloat16_between_machines) {
    // One machine: its sum (or mean) is everyone's, nothing to share back.
    if (layout_.hosts() == 1) return local_->all_reduce(data, count, op);
    local_->all_reduce(data, count, ReduceOp::kSum);  // this machine's sum
    if (leaders_ && bfloat16_between_machines) leaders_->all_reduce_bfloat16(data, count, ReduceOp::kSum);
    else if (leaders_) leaders_->all_reduce(data, count, ReduceOp::kSum);  // across machines
    local_->broadcast(data, count, 0);                                     // the leader's result to its machine
    if (op == ReduceOp::kMean) divide_by_size(data, count, size());
  }

  int rank_;
  HostLayout layout_;
  std::unique_ptr<Communicator> local_;
  std::unique_ptr<Communicator> leaders_;
};

}  // namespace

int HostLayout::hosts() const {
  return host_of.empty() ? 0 : *std::max_element(host_of.begin(), host_of.end()) + 1;
}

HostLayout HostLayout::from_keys(const std::vector<std::string>& host_of_rank) {
  HostLayout layout;
  std::map<std::string, int> number, members;
  for (const std::string& key : host_of_rank) {
    const auto [it, fresh] = number.emplace(key, static_cast<int>(number.size()));
    layout.host_of.push_back(it->second);
    layout.local_rank_of.push_back(members[key]++);
  }
  return layout;
}

std::unique_ptr<Communicator> make_shm_communicator(rendezvous::Store& store, const ShmOptions& options) {
  return std::make_unique<ShmCommunicator>(store, options);
}

std::unique_ptr<Communicator> make_hierarchical_communicator(int rank, HostLayout layout,
                                                             std::unique_ptr<Communicator> local,
                                                             std::unique_ptr<Communicator> leaders) {
  return std::make_unique<HierarchicalCommunicator>(rank, std::move(layout), std::move(local), std::move(leaders));
}

}  // namespace dtrain::comm
