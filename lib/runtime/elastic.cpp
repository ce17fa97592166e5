// Implementation of elastic.h.
#include "runtime/elastic.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"
#include "runtime/task_roles.h"

namespace dtrain::runtime {
namespace {

// The training tasks' names by cluster rank ("worker:0", "worker:1", ...).
std::vector<std::string> names_by_rank(const config::ClusterSpec& spec) {
  std::vector<std::string> names(static_cast<size_t>(spec.world_size()));
  for (const config::TaskId& t : spec.all_tasks())
    if (const int r = spec.rank(t); r >= 0) names[static_cast<size_t>(r)] = t.str();
  return names;
}

// The store's newest membership: its generation and the training tasks in it
// (membership/<generation>, which the store writes before the generation).
struct Listed {
  int64_t generation = 0;
  std::map<std::string, std::string> members;  // task name -> name#incarnation; generation 0: every training task
};

// "chief:0#1,worker:1#1" (membership/<generation>) into `out`.
void parse_members(const std::string& list, std::map<std::string, std::string>& out) {
  for (size_t begin = 0; begin < list.size();) {
    const size_t comma = std::min(list.find(',', begin), list.size());
    if (comma > begin) {
      const std::string id = list.substr(begin, comma - begin);
      out[id.substr(0, id.find('#'))] = id;
    }
    begin = comma + 1;
  }
}

// Generation 0's members: membership/0 when the job started without some
// training tasks (the chief's settle time ran out), else every training task.
Listed first_listed(rendezvous::Store& store, const std::vector<std::string>& names) {
  Listed out;
  if (const std::optional<std::string> first = store.get("membership/0"))
    parse_members(*first, out.members);
  else
    for (const std::string& name : names) out.members[name] = name + "#1";
  return out;
}

Listed read_membership(rendezvous::Store& store, const std::vector<std::string>& names) {
  const std::optional<std::string> generation = store.get("membership/generation");
  const int64_t g = generation && !generation->empty() ? std::stoll(*generation) : 0;
  if (g == 0) return first_listed(store, names);
  Listed out;
  out.generation = g;
  parse_members(store.get(str("membership/", g)).value_or(""), out.members);
  return out;
}

// A listing as a Membership (ranks ascending), leaving out `except`.
Membership as_membership(const Listed& listed, const std::vector<std::string>& names, const std::string& except = "") {
  Membership m{listed.generation, {}, {}};
  for (size_t r = 0; r < names.size(); ++r)
    if (const auto it = listed.members.find(names[r]); it != listed.members.end() && names[r] != except) {
      m.ranks.push_back(static_cast<int>(r));
      m.ids.push_back(it->second);
    }
  return m;
}

// Waits (polling the store, bounded by `seconds`) until the generation is past `before`.
std::optional<Listed> wait_for_change(ClusterTask& task, const std::vector<std::string>& names, int64_t before,
                                      double seconds) {
  const Stopwatch waited;
  for (;;) {
    if (task.session().wait_for_failure(0.0)) return std::nullopt;  // the job's failure, not a member's loss
    Listed listed = read_membership(task.session().store(), names);
    if (listed.generation > before) return listed;
    if (waited.seconds() > seconds) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// "worker:2 left the job", "worker:2 joined the job", or both.
std::string describe_change(const trainer::MembershipChange& change) {
  std::vector<std::string> parts;
  if (!change.left.empty()) parts.push_back(join(change.left, ", ") + " left the job");
  if (!change.joined.empty()) parts.push_back(join(change.joined, ", ") + " joined the job");
  return parts.empty() ? std::string("the members connect again") : join(parts, "; ");
}

// The chief finished training (train/final_step is `final_step`) while this
// task waited for the members' positions: a joiner, or a survivor that had done
// every step too (its last collective failed here, not on the chief), ends with
// the job; a survivor behind it cannot catch up alone.
Membership training_ended(const Membership& before, const trainer::ElasticState& elastic, const std::string& me,
                          const std::string& final_step) {
  const int64_t final = std::stoll(final_step);
  if (before.generation >= 0 && !(elastic.has_snapshot() && elastic.point().global_step >= final))
    throw RuntimeError(str("elastic: the chief finished the job's training at step ", final_step, " while ", me,
                           " re-formed its group after step ",
                           elastic.has_snapshot() ? elastic.point().global_step : int64_t{0}, "; ", me,
                           " stops without the steps it missed"));
  Membership ended;
  ended.generation = before.generation;
  ended.ended_at_step = final;
  return ended;
}

}  // namespace

Membership first_membership(ClusterTask& task) {
  const std::vector<std::string> names = names_by_rank(task.session().cluster().spec);
  return as_membership(first_listed(task.session().store(), names), names);
}

bool joins_running_job(ClusterTask& task) {
  const Listed now = read_membership(task.session().store(), names_by_rank(task.session().cluster().spec));
  return now.generation > 0 || !now.members.count(task.name());
}

Membership running_membership(ClusterTask& task) {
  const std::vector<std::string> names = names_by_rank(task.session().cluster().spec);
  Membership m = as_membership(read_membership(task.session().store(), names), names, task.name());
  m.generation = -1;  // (not a generation this task trained in: any newer one is a change)
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
  std::optional<Listed> listed = wait_for_change(task, names, before.generation, timeout_seconds);
  if (!listed) task.rethrow_collective_failure(cause);
  const Stopwatch agreeing;
  for (;;) {
    const Membership now = as_membership(*listed, names);
    if (!listed->members.count(me))
      throw PeerLost(str("this task (", me, ") was declared lost by the chief's store and the job went on without it"));
    const std::string prefix = str("elastic/g", now.generation, "/");
    store.set(prefix + me, elastic.point_json());
    std::vector<std::string> keys;
    for (int r : now.ranks) keys.push_back(prefix + names[static_cast<size_t>(r)]);
    bool all_posted = false;
    std::optional<std::string> final_step;
    while (!all_posted && agreeing.seconds() < timeout_seconds) {
      all_posted = store.wait(keys, 0.25);
      if (all_posted) break;
      if (read_membership(store, names).generation != now.generation) break;  // another change meanwhile
      if ((final_step = store.get(kFinalStepKey))) break;                      // the chief will not post
    }
    if (!all_posted && final_step) return training_ended(before, elastic, me, *final_step);
    if (!all_posted) {
      Listed newer = read_membership(store, names);
      if (newer.generation != now.generation) {
        listed = std::move(newer);
        continue;
      }
      throw TimeoutError(str("elastic: the training tasks did not all post their position for membership ",
                             now.generation, " within ", timeout_seconds, " s"));
    }
    // The furthest member (most steps done, then the epoch's end done too; of
    // those the lowest rank) is the source.
    const std::vector<std::optional<std::string>> points = store.get_many(keys);
    size_t source = 0;
    std::pair<int64_t, int64_t> furthest{-1, -1};
    for (size_t i = 0; i < points.size(); ++i) {
      const auto progress = trainer::ElasticState::progress_of(points[i].value_or("{\"global_step\": -1}"));
      if (progress > furthest) furthest = progress, source = i;
    }
    const int64_t best = furthest.first;
    elastic.generation = now.generation;
    elastic.source_rank = static_cast<int>(source);
    elastic.source_point = *points[source];
    trainer::MembershipChange change;
    change.generation = now.generation;
    change.unix_time = static_cast<double>(trace::now_us()) / 1e6;
    // (by name#incarnation where both are known: a task that left and came back
    // before the members agreed both left and joined)
    const auto absent = [&](const Membership& from, size_t i, const Membership& in) {
      const int r = from.ranks[i];
      const auto at = std::find(in.ranks.begin(), in.ranks.end(), r);
      if (at == in.ranks.end()) return true;
      const std::string& id = i < from.ids.size() ? from.ids[i] : std::string();
      const size_t j = static_cast<size_t>(at - in.ranks.begin());
      return !id.empty() && j < in.ids.size() && !in.ids[j].empty() && in.ids[j] != id;
    };
    for (size_t i = 0; i < before.ranks.size(); ++i)
      if (absent(before, i, now)) change.left.push_back(names[static_cast<size_t>(before.ranks[i])]);
    for (size_t i = 0; i < now.ranks.size(); ++i)
      if (absent(now, i, before)) change.joined.push_back(names[static_cast<size_t>(now.ranks[i])]);
    change.step = best;
    change.training_tasks = static_cast<int>(now.ranks.size());
    elastic.changes.push_back(change);
    log::warn("elastic: ", describe_change(change), "; ", now.ranks.size(), " training task(s) go on from step ", best,
              " (membership ", now.generation, ")");
    elastic.below_minimum.clear();
    if (static_cast<int64_t>(now.ranks.size()) < min_workers)
      elastic.below_minimum = str("elastic: ", now.ranks.size(), " training task(s) are left, fewer than "
                                  "strategy.elastic.min_workers (", min_workers, "); the job stops after step ", best);
    return now;
  }
}

}  // namespace dtrain::runtime
