// Native stacks of this process's threads, taken on request: what a hang report
// (runtime/hang_report.h) shows beside a thread's spans.
//
// native_stack(tid) sends the thread a signal (SIGRTMIN + 4) whose handler
// records its return addresses with backtrace(3); the caller names them with
// dladdr(3) and demangles them. The dtrain executable exports its symbols
// (ENABLE_EXPORTS), so its own functions have names; a frame with no symbol is
// "library+0xoffset". One stack at a time; the thread must be of this process.
// A thread that does not answer within the timeout (blocked signals, a stopped
// process) gives an empty stack. The handler is installed on first use, and
// backtrace(3) is called once beforehand so that the handler never loads a library.
#pragma once

#include <string>
#include <vector>

namespace dtrain {

// This thread's id as the kernel knows it (gettid).
int os_thread_id();

// The stack of thread `tid`, innermost frame first, without the sampler's own
// frames: "dtrain::data::Pipeline::next", "pthread_cond_wait", ... (function
// names without their parameters). At most `max_frames`.
std::vector<std::string> native_stack(int tid, int max_frames = 24, double timeout_seconds = 0.5);

// A demangled name without its parameter list and return type:
// "dtrain::data::Pipeline::next(dtrain::Batch&)" -> "dtrain::data::Pipeline::next".
std::string short_function_name(const std::string& demangled);

}  // namespace dtrain
