// Implementation of native_stack.h.
#include "core/native_stack.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace dtrain {
namespace {

constexpr int kMaxFrames = 64;

// The one request in flight: kIdle -> kAsked (the caller) -> kTaking (the
// handler, on the asked thread) -> kTaken. A caller that gives up moves kAsked
// back to kIdle, so a late handler finds nothing to do.
enum State : int { kIdle, kAsked, kTaking, kTaken };
std::atomic<int> g_state{kIdle};
std::atomic<int> g_target{0};
void* g_frames[kMaxFrames];
int g_count = 0;
void* g_interrupted = nullptr;  // the program counter the signal interrupted

int signal_number() { return SIGRTMIN + 4; }

void on_signal(int, siginfo_t*, void* context) {
  const int saved_errno = errno;
  int expected = kAsked;
  if (g_target.load() == static_cast<int>(syscall(SYS_gettid)) && g_state.compare_exchange_strong(expected, kTaking)) {
#if defined(__x86_64__)
    g_interrupted = reinterpret_cast<void*>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
    g_interrupted = reinterpret_cast<void*>(static_cast<ucontext_t*>(context)->uc_mcontext.pc);
#endif
    g_count = backtrace(g_frames, kMaxFrames);
    g_state.store(kTaken);
  }
  errno = saved_errno;
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    void* warm[2];
    backtrace(warm, 2);  // loads the unwinder now, not inside the handler
    struct sigaction action {};
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_RESTART | SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(signal_number(), &action, nullptr);
  });
}

// The function at `inside` (an address within it), or "library+0xoffset".
std::string name_at(void* inside) {
  Dl_info info{};
  if (dladdr(inside, &info) == 0 || !info.dli_fname) return "??";
  if (info.dli_sname) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    std::string name = status == 0 && demangled ? short_function_name(demangled) : info.dli_sname;
    std::free(demangled);
    return name;
  }
  std::string file = info.dli_fname;
  if (const size_t slash = file.rfind('/'); slash != std::string::npos) file = file.substr(slash + 1);
  char offset[32];
  std::snprintf(offset, sizeof offset, "+0x%zx",
                static_cast<size_t>(static_cast<char*>(inside) - static_cast<char*>(info.dli_fbase)));
  return file + offset;
}

// The function a return address belongs to: it points after the call, so the
// byte before it is inside the caller.
std::string name_of(void* return_address) { return name_at(static_cast<char*>(return_address) - 1); }

}  // namespace

int os_thread_id() { return static_cast<int>(syscall(SYS_gettid)); }

std::string short_function_name(const std::string& demangled) {
  // Cut at the parameter list: the first '(' outside <...> that does not open
  // "(anonymous namespace)"; then drop a return type (text before the last
  // space outside <...>).
  std::string name;
  int angle = 0;
  for (size_t i = 0; i < demangled.size(); ++i) {
    const char c = demangled[i];
    if (c == '<') ++angle;
    if (c == '>') --angle;
    if (c == '(' && angle == 0 && name.size() >= 8 && name.compare(name.size() - 8, 8, "operator") == 0 &&
        demangled.compare(i, 2, "()") == 0) {  // operator()
      name += "()";
      ++i;
      continue;
    }
    if (c == '(' && angle == 0 && demangled.compare(i, 21, "(anonymous namespace)") != 0) break;
    name.push_back(c);
  }
  angle = 0;
  size_t start = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<' || name[i] == '(') ++angle;
    if (name[i] == '>' || name[i] == ')') --angle;
    if (name[i] == ' ' && angle == 0 && (i < 9 || name.compare(i - 8, 8, "operator") != 0)) start = i + 1;
  }
  name = name.substr(start);
  // ABI tags ("[abi:cxx11]") say nothing to a reader.
  for (size_t at; (at = name.find("[abi:")) != std::string::npos;) {
    const size_t end = name.find(']', at);
    if (end == std::string::npos) break;
    name.erase(at, end - at + 1);
  }
  return name;
}

std::vector<std::string> native_stack(int tid, int max_frames, double timeout_seconds) {
  install_once();
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  g_target.store(tid);
  g_state.store(kAsked);
  if (syscall(SYS_tgkill, getpid(), tid, signal_number()) != 0) {
    g_state.store(kIdle);
    return {};
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (g_state.load() != kTaken) {
    if (std::chrono::steady_clock::now() >= deadline) {
      int expected = kAsked;
      if (g_state.compare_exchange_strong(expected, kIdle)) return {};  // it never answered
      // The handler is taking it now: it ends soon.
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // The handler's frames come first, then the signal trampoline (__restore_rt),
  // then the interrupted one: start there (at frame 2, the usual place, when the
  // interrupted address is not among them).
  int first = std::min(2, g_count);
  for (int i = 0; i < g_count; ++i)
    if (g_frames[i] == g_interrupted) {
      first = i;
      break;
    }
  std::vector<std::string> frames;
  for (int i = first; i < g_count && static_cast<int>(frames.size()) < max_frames; ++i)
    frames.push_back(i == first ? name_at(g_frames[i]) : name_of(g_frames[i]));
  // A thread that asked for its own stack was interrupted in here: start at its caller.
  const auto self = std::find(frames.begin(), frames.end(), "dtrain::native_stack");
  if (tid == os_thread_id() && self != frames.end()) frames.erase(frames.begin(), self + 1);
  g_state.store(kIdle);
  return frames;
}

}  // namespace dtrain
