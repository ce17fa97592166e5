// Implementation of work_queue.h. Keys (under "ps/work/"): open (first unit id),
// next (tickets taken), claim/<id> (owner), done/<id> (result: loss sum, correct,
// samples, steps, label positions), requeued (count),
// requeue/<k> (a unit id), requeue_next (requeue tickets taken), closed.
#include "ps/work_queue.h"

#include <algorithm>
#include <cstdio>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::ps {
namespace {

const std::string kPrefix = "ps/work/";

std::string encode(const UnitResult& r) {
  char text[160];
  std::snprintf(text, sizeof text, "%.17g %lld %lld %lld %lld", r.loss_sum, static_cast<long long>(r.correct),
                static_cast<long long>(r.count), static_cast<long long>(r.steps), static_cast<long long>(r.tokens));
  return text;
}

UnitResult decode(const std::string& text) {
  UnitResult r;
  long long correct = 0, count = 0, steps = 0, tokens = 0;
  if (std::sscanf(text.c_str(), "%lf %lld %lld %lld %lld", &r.loss_sum, &correct, &count, &steps, &tokens) != 5)
    throw CommError(str("a work unit's result '", text, "' in the job's store is malformed"));
  r.correct = correct;
  r.count = count;
  r.steps = steps;
  r.tokens = tokens;
  return r;
}

}  // namespace

WorkQueue::WorkQueue(rendezvous::Store& store, WorkPlan plan) : store_(store), plan_(plan) {
  DT_CHECK(plan_.steps_per_unit >= 1 && plan_.steps_per_epoch >= 1, "a work plan needs steps");
}

WorkUnit WorkQueue::unit(int64_t id) const {
  WorkUnit u;
  u.id = id;
  u.epoch = id / plan_.units_per_epoch();
  u.first_step = (id % plan_.units_per_epoch()) * plan_.steps_per_unit;
  u.end_step = std::min(u.first_step + plan_.steps_per_unit, plan_.steps_per_epoch);
  return u;
}

void WorkQueue::open(int64_t first_id) {
  first_id_ = first_id;
  store_.set(kPrefix + "open", std::to_string(first_id));
}

namespace {
std::string done_key(int64_t id, int worker) {
  return kPrefix + "done/" + std::to_string(id) + (worker >= 0 ? "/" + std::to_string(worker) : "");
}
}  // namespace

std::optional<UnitResult> WorkQueue::result(int64_t id, int worker) {
  const auto text = store_.get(done_key(id, worker));
  if (!text) return std::nullopt;
  return decode(*text);
}

int WorkQueue::requeue_units_of(const std::string& owner) {
  const int64_t handed = std::min(store_.add(kPrefix + "next", 0), plan_.total_units() - first_id_);
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < handed; ++t) ids.push_back(first_id_ + t);
  const int64_t requeued = store_.add(kPrefix + "requeued", 0);
  for (int64_t k = 0; k < requeued; ++k)
    if (const auto id = store_.get(kPrefix + "requeue/" + std::to_string(k))) ids.push_back(std::stoll(*id));
  int count = 0;
  for (int64_t id : ids) {
    const std::string key = std::to_string(id);
    if (store_.get(kPrefix + "done/" + key)) continue;
    const std::optional<std::string> claim = store_.get(kPrefix + "claim/" + key);
    if (!claim) {  // perhaps the lost worker's, taken just before it died: look again later
      const bool noted = std::any_of(unowned_.begin(), unowned_.end(), [&](const auto& u) { return u.first == id; });
      if (!noted) unowned_.emplace_back(id, std::chrono::steady_clock::now());
      continue;
    }
    if (*claim != owner) continue;
    requeue(id);
    ++count;
  }
  return count;
}

int WorkQueue::requeue_orphans(double min_age_seconds) {
  int count = 0;
  const auto now = std::chrono::steady_clock::now();
  for (auto it = unowned_.begin(); it != unowned_.end();) {
    if (std::chrono::duration<double>(now - it->second).count() < min_age_seconds) {
      ++it;
      continue;
    }
    const std::string key = std::to_string(it->first);
    if (!store_.get(kPrefix + "done/" + key) && !store_.get(kPrefix + "claim/" + key)) {
      requeue(it->first);
      ++count;
    }
    it = unowned_.erase(it);
  }
  return count;
}

void WorkQueue::requeue(int64_t id) {
  const std::string key = std::to_string(id);
  store_.set(kPrefix + "claim/" + key, "requeued");  // so a later scan does not requeue it twice
  const int64_t k = store_.add(kPrefix + "requeued", 1) - 1;
  store_.set(kPrefix + "requeue/" + std::to_string(k), key);
}

void WorkQueue::close() { store_.set(kPrefix + "closed", "1"); }

int64_t WorkQueue::wait_open(const std::function<void()>& poll) {
  while (first_id_ < 0) {
    if (store_.wait({kPrefix + "open"}, 0.2)) {
      first_id_ = std::stoll(store_.get(kPrefix + "open").value_or("0"));
      break;
    }
    poll();
  }
  return first_id_;
}

std::optional<WorkUnit> WorkQueue::take(const std::string& owner, const std::function<void()>& poll) {
  wait_open(poll);
  const auto claim = [&](int64_t id) {
    store_.set(kPrefix + "claim/" + std::to_string(id), owner);
    return unit(id);
  };
  const auto slot_key = [](int64_t k) { return kPrefix + "requeue/" + std::to_string(k); };
  // Requeued units first, so that a lost worker's unit does not hold its epoch back.
  if (!slot_ && store_.add(kPrefix + "requeued", 0) > store_.add(kPrefix + "requeue_next", 0))
    slot_ = store_.add(kPrefix + "requeue_next", 1) - 1;
  if (slot_) {
    if (const auto id = store_.get(slot_key(*slot_))) {
      slot_.reset();
      return claim(std::stoll(*id));
    }
    // Another worker took the requeued unit first: this slot is ours for the next one.
  }
  const int64_t id = first_id_ + store_.add(kPrefix + "next", 1) - 1;
  if (id < plan_.total_units()) return claim(id);
  // No fresh units left: wait for a requeued one, or for the end.
  if (!slot_) slot_ = store_.add(kPrefix + "requeue_next", 1) - 1;
  while (!store_.wait({slot_key(*slot_)}, 0.2)) {
    if (store_.get(kPrefix + "closed")) return std::nullopt;
    poll();
  }
  const int64_t requeued = std::stoll(store_.get(slot_key(*slot_)).value_or("0"));
  slot_.reset();
  return claim(requeued);
}

void WorkQueue::complete(const WorkUnit& unit, const UnitResult& result, int worker) {
  store_.set(done_key(unit.id, worker), encode(result));
}

}  // namespace dtrain::ps
