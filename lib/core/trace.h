// A trace timeline in the Chrome trace format (loads in Perfetto and
// chrome://tracing), recorded when output.trace is on.
//
// Spans are complete events ("ph": "X") with a name, a category, a start and a
// duration in microseconds on the wall clock (CLOCK_REALTIME) and the thread they
// ran on. The tasks of a cluster put their events on the chief's clock: each
// measures its offset to it through the rendezvous (set_clock_offset_us), which
// write() adds to every timestamp; each thread is its own track, named with
// set_thread_name(). Recording costs two clock reads and one append under a
// mutex per span, and nothing at all while tracing is off. write() saves one
// process's events as {"traceEvents": [...]}; merge_traces() joins the files of
// several tasks into one, a process per task.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::trace {

void enable();    // start recording (idempotent)
bool enabled();
int64_t now_us(); // microseconds since the Unix epoch

// How far the reference clock (the chief's) is ahead of this machine's, and how
// far that estimate may be off (half the round trip it was measured over).
struct ClockOffset {
  int64_t offset_us = 0;
  int64_t uncertainty_us = 0;
};

// write() shifts every timestamp by the offset and records both as a
// "clock_offset_us" metadata event (args offset_us, uncertainty_us).
void set_clock_offset(ClockOffset offset);

// Names the calling thread's track ("main", "gradient all-reduce", ...).
void set_thread_name(const std::string& name);

// Records one complete event that began at start_us and lasted dur_us on this thread.
void complete(const char* name, const char* category, int64_t start_us, int64_t dur_us,
              const std::string& detail = "");

// What each thread is doing now, always kept (tracing or not): the names of its
// open spans, outermost first, and when the innermost began. A hang's report
// (runtime/hang_report.h) says where each thread is with it.
struct ThreadActivity {
  std::string thread;              // set_thread_name()'s, or "thread <tid>"
  std::vector<std::string> spans;  // e.g. {"step", "data"}
  int64_t since_us = 0;            // when the innermost span began (wall clock)
  int os_tid = 0;                  // the kernel's id of the thread (native_stack.h)
};
std::vector<ThreadActivity> activities();
// The calling thread enters / leaves a span named `name` (Span does both).
void enter(const char* name);
void leave(const char* name);

// RAII: records [construction, destruction) as a complete event, and keeps the
// span in this thread's activity while it is open.
class Span {
 public:
  Span(const char* name, const char* category, std::string detail = "")
      : name_(name), category_(category), detail_(std::move(detail)), start_(enabled() ? now_us() : -1) {
    enter(name_);
  }
  ~Span() { end(); }
  // Ends the span now (the destructor then records nothing more).
  void end() {
    if (open_) leave(name_);
    open_ = false;
    if (start_ >= 0) complete(name_, category_, start_, now_us() - start_, detail_);
    start_ = -1;
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  const char* category_;
  std::string detail_;
  int64_t start_;
  bool open_ = true;
};

// Writes the events recorded so far to `path` (atomically: a temporary file, then
// rename) as process `pid` named `process_name`. IoError when it cannot.
void write(const std::string& path, const std::string& process_name, int pid);

// Joins trace files written by write() (one per task, each its own pid) into
// `path`. Returns how many were joined; IoError for a file that is not a trace.
int merge_traces(const std::vector<std::string>& inputs, const std::string& path);

}  // namespace dtrain::trace
