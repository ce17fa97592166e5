// Implementation of trace.h: one process-wide event list under a mutex, thread
// ids handed out in order of first use, nlohmann/json to write and merge.
#include "core/trace.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/native_stack.h"
#include "core/strings.h"

namespace dtrain::trace {
namespace {

struct Event {
  const char* name;
  const char* category;
  int64_t start_us, dur_us;
  int tid;
  std::string detail;
};

// At most this many events are kept (about 100 MB of JSON); later ones are counted, not kept.
constexpr size_t kMaxEvents = 1'000'000;

struct Recorder {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::vector<Event> events;
  std::vector<std::pair<int, std::string>> thread_names;
  int64_t dropped = 0;
  int next_tid = 0;
  int64_t clock_offset_us = 0;  // added to every timestamp written (set_clock_offset)
  int64_t clock_uncertainty_us = 0;
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

int this_thread_id() {
  thread_local int tid = -1;
  if (tid < 0) {
    Recorder& r = recorder();
    std::lock_guard<std::mutex> lock(r.mutex);
    tid = r.next_tid++;
  }
  return tid;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  write_text_file(path, "output.trace", j.dump() + "\n");
}

}  // namespace

void enable() { recorder().on = true; }
bool enabled() { return recorder().on.load(std::memory_order_relaxed); }

int64_t now_us() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

void set_clock_offset(ClockOffset offset) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.clock_offset_us = offset.offset_us;
  r.clock_uncertainty_us = offset.uncertainty_us;
}

namespace {

// One thread's open spans; registered while the thread lives.
struct Activity {
  std::mutex mutex;
  std::string thread;
  int os_tid = 0;
  std::vector<std::pair<const char*, int64_t>> open;  // (name, began)
};

struct Activities {
  std::mutex mutex;
  std::vector<std::shared_ptr<Activity>> threads;
};

Activities& all_activities() {
  static Activities* a = new Activities;  // never destroyed: threads may outlive static destruction
  return *a;
}

// The calling thread's record, registered on first use and dropped when the thread ends.
Activity& my_activity() {
  struct Registration {
    std::shared_ptr<Activity> activity = std::make_shared<Activity>();
    Registration() {
      activity->thread = str("thread ", this_thread_id());
      activity->os_tid = os_thread_id();
      Activities& a = all_activities();
      std::lock_guard<std::mutex> lock(a.mutex);
      a.threads.push_back(activity);
    }
    ~Registration() {
      Activities& a = all_activities();
      std::lock_guard<std::mutex> lock(a.mutex);
      std::erase(a.threads, activity);
    }
  };
  thread_local Registration registration;
  return *registration.activity;
}

}  // namespace

void enter(const char* name) {
  Activity& a = my_activity();
  std::lock_guard<std::mutex> lock(a.mutex);
  a.open.emplace_back(name, now_us());
}

void leave(const char* name) {
  Activity& a = my_activity();
  std::lock_guard<std::mutex> lock(a.mutex);
  for (size_t i = a.open.size(); i-- > 0;)
    if (a.open[i].first == name) {
      a.open.erase(a.open.begin() + static_cast<long>(i));
      return;
    }
}

std::vector<ThreadActivity> activities() {
  std::vector<ThreadActivity> out;
  Activities& all = all_activities();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (const auto& t : all.threads) {
    std::lock_guard<std::mutex> thread_lock(t->mutex);
    if (t->open.empty()) continue;
    ThreadActivity activity{t->thread, {}, t->open.back().second, t->os_tid};
    for (const auto& [name, began] : t->open) activity.spans.emplace_back(name);
    out.push_back(std::move(activity));
  }
  return out;
}

void set_thread_name(const std::string& name) {
  {
    Activity& a = my_activity();
    std::lock_guard<std::mutex> lock(a.mutex);
    a.thread = name;
  }
  const int tid = this_thread_id();
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.thread_names.emplace_back(tid, name);
}

void complete(const char* name, const char* category, int64_t start_us, int64_t dur_us, const std::string& detail) {
  if (!enabled()) return;
  const int tid = this_thread_id();
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.events.size() >= kMaxEvents) {
    ++r.dropped;
    return;
  }
  r.events.push_back({name, category, start_us, dur_us, tid, detail});
}

void write(const std::string& path, const std::string& process_name, int pid) {
  Recorder& r = recorder();
  nlohmann::json events = nlohmann::json::array();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", process_name}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
    for (const auto& [tid, name] : r.thread_names)
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
    for (const Event& e : r.events) {
      nlohmann::json j{{"ph", "X"}, {"name", e.name}, {"cat", e.category}, {"ts", e.start_us + r.clock_offset_us},
                       {"dur", e.dur_us}, {"pid", pid},   {"tid", e.tid}};
      if (!e.detail.empty()) j["args"] = {{"detail", e.detail}};
      events.push_back(std::move(j));
    }
    if (r.dropped > 0)
      events.push_back({{"ph", "M"}, {"name", "dropped_events"}, {"pid", pid}, {"args", {{"count", r.dropped}}}});
    events.push_back(
        {{"ph", "M"}, {"name", "clock_offset_us"}, {"pid", pid}, {"args", {{"offset_us", r.clock_offset_us}, {"uncertainty_us", r.clock_uncertainty_us}}}});
  }
  const std::filesystem::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  write_json(path, {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}});
}

int merge_traces(const std::vector<std::string>& inputs, const std::string& path) {
  nlohmann::json events = nlohmann::json::array();
  for (const std::string& input : inputs) {
    std::ifstream in(input);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw IoError(str("output.trace: '", input, "' is not a trace file: ", e.what()));
    }
    for (auto& e : j.at("traceEvents")) events.push_back(std::move(e));
  }
  write_json(path, {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}});
  return static_cast<int>(inputs.size());
}

}  // namespace dtrain::trace
