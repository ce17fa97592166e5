// Implementation of hang_report.h.
#include "runtime/hang_report.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <vector>

#include "comm/flight_recorder.h"
#include "core/native_stack.h"
#include "core/strings.h"
#include "core/trace.h"

namespace dtrain::runtime {
namespace {

constexpr double kStuckSeconds = 2.0;
constexpr int kStackFrames = 12;  // of each thread's native stack in a report
constexpr int kShownFrames = 8;   // ... and in the diagnosis

struct Collective {
  std::string group, op, state;
  uint64_t seq = 0;
  size_t bytes = 0;
  double age_s = 0;
};

struct Thread {
  std::string name, where;
  double age_s = 0;
  std::vector<std::string> stack;  // native frames, innermost first (a "stack" line)
};

struct Report {
  bool answered = false;
  int64_t step = -1;
  std::vector<Thread> threads;
  std::map<std::string, Collective> last;  // group -> its newest collective
  std::map<std::string, std::map<uint64_t, Collective>> recorded;  // group -> seq -> every recorded one
};

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  for (std::string field; std::getline(in, field, '\t');) out.push_back(field);
  return out;
}

Report parse(const std::string& text) {
  Report r;
  r.answered = !text.empty();
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto f = split_tabs(line);
    if (f.size() == 2 && f[0] == "step") r.step = std::strtoll(f[1].c_str(), nullptr, 10);
    if (f.size() == 4 && f[0] == "thread") r.threads.push_back({f[1], f[3], std::strtod(f[2].c_str(), nullptr) / 1000, {}});
    if (f.size() >= 3 && f[0] == "stack")
      for (Thread& t : r.threads)
        if (t.name == f[1] && t.stack.empty()) t.stack.assign(f.begin() + 2, f.end());
    if (f.size() == 7 && f[0] == "collective") {
      Collective c{f[1], f[3], f[5], std::strtoull(f[2].c_str(), nullptr, 10),
                   static_cast<size_t>(std::strtoull(f[4].c_str(), nullptr, 10)), std::strtod(f[6].c_str(), nullptr) / 1000};
      Collective& newest = r.last[c.group];
      if (c.seq >= newest.seq) newest = c;
      r.recorded[c.group][c.seq] = c;
    }
  }
  return r;
}

std::string seconds_text(double s) { return str(static_cast<int64_t>(s * 10 + 0.5) / 10.0, " s"); }

std::string collective_text(const Collective& c) {
  return str(c.op, " #", c.seq, " of ", c.group, " (", format_bytes(static_cast<double>(c.bytes)), ")");
}

// A span's name, and for the names that say little by themselves, what they are.
std::string gloss(const std::string& spans) {
  static const std::map<std::string, std::string> meaning = {
      {"data", "data (the input pipeline: data::Pipeline::next, waiting for the next batch)"},
      {"gradient wait", "gradient wait (for its gradients' all-reduce)"},
      {"pipeline receive", "pipeline receive (for the neighbouring stage's activations)"},
  };
  const size_t last = spans.rfind(" > ");
  const std::string inner = last == std::string::npos ? spans : spans.substr(last + 3);
  auto it = meaning.find(inner);
  return it == meaning.end() ? spans : spans.substr(0, spans.size() - inner.size()) + it->second;
}

// "its thread main is in step > data (31.2 s)" (every thread inside a span);
// `stacks`: with each one's innermost native frames, "(native stack: a < b < ...)".
std::string where_text(const Report& r, bool stacks = false) {
  std::vector<std::string> parts;
  for (const Thread& t : r.threads) {
    std::string part = str("thread ", t.name, " is in ", gloss(t.where), " for ", seconds_text(t.age_s));
    if (stacks && !t.stack.empty()) {
      const size_t shown = std::min<size_t>(t.stack.size(), kShownFrames);
      part += str(" (native stack, innermost first: ",
                  join(std::vector<std::string>(t.stack.begin(), t.stack.begin() + static_cast<long>(shown)), " < "),
                  shown < t.stack.size() ? " < ..." : "", ")");
    }
    parts.push_back(part);
  }
  return parts.empty() ? "no thread of it is inside a traced span" : join(parts, ", ");
}

// The first collective of `group` that the tasks entered differently (the
// lowest sequence number two or more of them recorded with another op or size):
// the task that differs from what most entered is named. False when they agree
// on every one they have in common. (The newest alone can mislead: a task whose
// collective completed may have moved on to the next, a broadcast say, while the
// others still wait in the one they disagree on.)
bool first_disagreement(const std::string& group, const std::map<std::string, Report>& reports,
                        std::vector<std::string>& findings) {
  std::set<uint64_t> seqs;
  for (const auto& [task, r] : reports)
    if (auto it = r.recorded.find(group); it != r.recorded.end())
      for (const auto& [seq, c] : it->second) seqs.insert(seq);
  for (const uint64_t seq : seqs) {
    std::map<std::string, const Collective*> entered;  // task -> its collective #seq
    std::map<std::pair<std::string, size_t>, int> kinds;
    for (const auto& [task, r] : reports)
      if (auto g = r.recorded.find(group); g != r.recorded.end())
        if (auto c = g->second.find(seq); c != g->second.end()) {
          entered[task] = &c->second;
          ++kinds[{c->second.op, c->second.bytes}];
        }
    if (kinds.size() < 2) continue;
    const auto most = std::max_element(kinds.begin(), kinds.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    if (std::count_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.second == most->second; }) > 1) {
      // No majority among the tasks that entered it (one of them against one, a
      // third not there yet): which is the odd one cannot be told; say what each did.
      std::vector<std::string> views, absent;
      for (const auto& [task, c] : entered)
        views.push_back(str(task, " entered it as ", c->op, " of ", format_bytes(static_cast<double>(c->bytes))));
      for (const auto& [task, r] : reports)
        if (!entered.count(task)) absent.push_back(task);
      findings.push_back(str(group, " #", seq, ": ", join(views, ", "),
                             absent.empty() ? "" : str(" (", join(absent, ", "), " not yet)"),
                             ": the tasks disagree on the collectives (a bucket size or a skipped call)"));
      return true;
    }
    for (const auto& [task, c] : entered)
      if (std::make_pair(c->op, c->bytes) != most->first)
        findings.push_back(str(task, " entered ", group, " #", seq, " as ", c->op, " of ",
                               format_bytes(static_cast<double>(c->bytes)), " where the others have ",
                               most->first.first, " of ", format_bytes(static_cast<double>(most->first.second)),
                               ": the tasks disagree on the collectives (a bucket size or a skipped call)"));
    return true;
  }
  return false;
}

// The findings of one group's collectives across the tasks: the first they
// disagree on, else who has not entered the newest.
void diagnose_group(const std::string& group, const std::map<std::string, Report>& reports,
                    std::vector<std::string>& findings) {
  if (first_disagreement(group, reports, findings)) return;
  uint64_t newest = 0;
  for (const auto& [task, r] : reports)
    if (auto it = r.last.find(group); it != r.last.end()) newest = std::max(newest, it->second.seq);
  // What most tasks entered as #newest: the reference for sizes and ops.
  std::map<std::pair<std::string, size_t>, int> kinds;
  const Collective* reference = nullptr;
  double oldest_age = 0;
  for (const auto& [task, r] : reports)
    if (auto it = r.last.find(group); it != r.last.end() && it->second.seq == newest) {
      const int n = ++kinds[{it->second.op, it->second.bytes}];
      if (!reference || n > kinds[{reference->op, reference->bytes}]) reference = &it->second;
      oldest_age = std::max(oldest_age, it->second.age_s);
    }
  if (!reference) return;
  for (const auto& [task, r] : reports) {
    if (!r.answered) continue;
    auto it = r.last.find(group);
    // The tasks answer within about a heartbeat interval of each other: in a
    // job that moves, one may be a collective or two behind in its report.
    // Behind a collective that the others entered 2 s ago or more, it is stuck.
    if ((it == r.last.end() || it->second.seq < newest) && oldest_age >= kStuckSeconds) {
      const std::string last = it == r.last.end() ? "none" : str("#", it->second.seq, " ", it->second.state);
      findings.push_back(str(task, " has not entered ", collective_text(*reference), ", which the others entered ",
                             seconds_text(oldest_age), " ago (its last: ", last, "); its ", where_text(r, true)));
    }
  }
}

}  // namespace

std::string local_report(int64_t step) {
  const int64_t now = trace::now_us();
  std::string out = str("step\t", step, "\n");
  for (const trace::ThreadActivity& t : trace::activities()) {
    out += str("thread\t", t.thread, "\t", (now - t.since_us) / 1000, "\t", join(t.spans, " > "), "\n");
    const std::vector<std::string> frames = native_stack(t.os_tid, kStackFrames);
    if (!frames.empty()) out += str("stack\t", t.thread, "\t", join(frames, "\t"), "\n");
  }
  for (const comm::FlightEntry& e : comm::flight_entries())
    out += str("collective\t", e.group, "\t", e.group_seq, "\t", e.op, "\t", e.bytes, "\t", e.state, "\t",
               (now - e.started_us) / 1000, "\n");
  return out;
}

std::string diagnose(const std::string& reason, const std::map<std::string, std::string>& texts) {
  std::map<std::string, Report> reports;
  std::set<std::string> groups;
  for (const auto& [task, text] : texts) {
    reports[task] = parse(text);
    for (const auto& [group, c] : reports[task].last) groups.insert(group);
  }
  std::vector<std::string> findings;
  for (const auto& group : groups) diagnose_group(group, reports, findings);
  for (const auto& [task, r] : reports)
    if (!r.answered) findings.push_back(str(task, " did not answer (its process is stuck where its heartbeat thread cannot run, or it is gone)"));
  if (findings.empty()) {
    double pending = -1;  // the age of the oldest collective still running, if any
    for (const auto& [task, r] : reports)
      for (const auto& [group, c] : r.last)
        if (c.state == "started") pending = std::max(pending, c.age_s);
    if (pending >= kStuckSeconds)
      findings.push_back(str("every task is inside the same collective, for ", seconds_text(pending),
                             ": it is slow or stuck in the network, not in one task"));
    else
      findings.push_back("nothing is stuck: no collective has been waiting 2 s or more, and the tasks agree on "
                         "them; where each task is:");
  }
  std::string out = str("hang report (", reason, "):\n");
  for (const auto& f : findings) out += str("  ", f, "\n");
  for (const auto& [task, r] : reports) {
    if (!r.answered) continue;
    std::vector<std::string> last;
    for (const auto& [group, c] : r.last)
      last.push_back(str(collective_text(c), " ", c.state, ", ", seconds_text(c.age_s), " ago"));
    out += str("  ", task, ": step ", r.step, "; ", where_text(r), last.empty() ? "" : "; last collective: ",
               join(last, ", "), "\n");
  }
  out.pop_back();  // the caller's log line ends it
  return out;
}

}  // namespace dtrain::runtime
