// Implementation of elastic.h.
#include "runtime/elastic.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"

namespace dtrain::runtime {
namespace {

// The training tasks' names by cluster rank ("worker:0", "worker:1", ...).
std::vector<std::string> names_by_rank(const config::ClusterSpec& spec) {
  std::vector<std::string> names(static_cast<size_t>(spec.world_size()));
  for (const config::TaskId& t : spec.all_tasks())
    if (const int r = spec.rank(t); r >= 0) names[static_cast<size_t>(r)] = t.str();
  return names;
}

int64_t number_or_zero(const std::optional<std::string>& text) {
  return text && !text->empty() ? std::stoll(*text) : 0;
}

// The store's membership generation and the training tasks lost by then (read
// in two requests: the generation with the count of lost tasks in one, so the
// names read next cover at least that generation's).
struct Losses {
  int64_t generation = 0;
  std::set<std::string> lost;  // task names
};

Losses read_losses(rendezvous::Store& store) {
  const auto counts = store.get_many({"membership/generation", "lost_count"});
  Losses out;
  out.generation = number_or_zero(counts[0]);
  const int64_t lost = number_or_zero(counts[1]);
  std::vector<std::string> keys;
  for (int64_t i = 1; i <= lost; ++i) keys.push_back(str("lost/", i));
  for (const auto& value : store.get_many(keys))
    if (value) out.lost.insert(value->substr(0, value->find('#')));  // "worker:2#1"
  return out;
}

// Waits (polling the store, bounded by `seconds`) until the generation is past `before`.
std::optional<Losses> wait_for_loss(ClusterTask& task, int64_t before, double seconds) {
  const Stopwatch waited;
  for (;;) {
    if (task.session().wait_for_failure(0.0)) return std::nullopt;  // the job's failure, not a member's loss
    Losses losses = read_losses(task.session().store());
    if (losses.generation > before) return losses;
    if (waited.seconds() > seconds) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

Membership first_membership(ClusterTask& task) {
  Membership m;
  for (int r = 0; r < task.session().world_size(); ++r) m.ranks.push_back(r);
  return m;
}

Membership agree_on_membership(ClusterTask& task, trainer::ElasticState& elastic, const Membership& before,
                               const Error& cause, int64_t min_workers, double timeout_seconds) {
  elastic.reforming.emplace();
  rendezvous::ClusterSession& session = task.session();
  rendezvous::Store& store = session.store();
  const std::vector<std::string> names = names_by_rank(session.cluster().spec);
  const std::string me = session.task().str();
  // A killed task's connections close at once and the store counts it then; a
  // cut-off one is counted after runtime.heartbeat_timeout.
  std::optional<Losses> losses = wait_for_loss(task, before.generation, timeout_seconds);
  if (!losses) task.rethrow_collective_failure(cause);
  const Stopwatch agreeing;
  for (;;) {
    Membership now{losses->generation, {}};
    for (size_t r = 0; r < names.size(); ++r)
      if (!losses->lost.count(names[r])) now.ranks.push_back(static_cast<int>(r));
    if (losses->lost.count(me))
      throw PeerLost(str("this task (", me, ") was declared lost by the chief's store and the job went on without it"));
    const std::string prefix = str("elastic/g", now.generation, "/");
    store.set(prefix + me, elastic.point_json());
    std::vector<std::string> keys;
    for (int r : now.ranks) keys.push_back(prefix + names[static_cast<size_t>(r)]);
    bool all_posted = false;
    while (!all_posted && agreeing.seconds() < timeout_seconds) {
      all_posted = store.wait(keys, 0.25);
      if (all_posted) break;
      Losses newer = read_losses(store);
      if (newer.generation != now.generation) break;  // another loss meanwhile: the next generation
    }
    if (!all_posted) {
      Losses newer = read_losses(store);
      if (newer.generation != now.generation) {
        losses = std::move(newer);
        continue;
      }
      throw TimeoutError(str("elastic: the training tasks did not all post their position for membership ",
                             now.generation, " within ", timeout_seconds, " s"));
    }
    // The furthest member (most steps done; of those the lowest rank) is the source.
    const std::vector<std::optional<std::string>> points = store.get_many(keys);
    size_t source = 0;
    int64_t best = -1;
    for (size_t i = 0; i < points.size(); ++i) {
      const int64_t step = trainer::ElasticState::step_of(points[i].value_or("{\"global_step\": -1}"));
      if (step > best) best = step, source = i;
    }
    elastic.generation = now.generation;
    elastic.source_rank = static_cast<int>(source);
    elastic.source_point = *points[source];
    trainer::MembershipChange change;
    change.generation = now.generation;
    change.unix_time = static_cast<double>(trace::now_us()) / 1e6;
    for (int r : before.ranks)
      if (!std::count(now.ranks.begin(), now.ranks.end(), r)) change.left.push_back(names[static_cast<size_t>(r)]);
    change.step = best;
    change.training_tasks = static_cast<int>(now.ranks.size());
    elastic.changes.push_back(change);
    log::warn("elastic: ", join(change.left, ", "), " left the job; ", now.ranks.size(),
              " training task(s) go on from step ", best, " (membership ", now.generation, ")");
    elastic.below_minimum.clear();
    if (static_cast<int64_t>(now.ranks.size()) < min_workers)
      elastic.below_minimum = str("elastic: ", now.ranks.size(), " training task(s) are left, fewer than "
                                  "strategy.elastic.min_workers (", min_workers, "); the job stops after step ", best);
    return now;
  }
}

}  // namespace dtrain::runtime
