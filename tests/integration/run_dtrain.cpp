// Implementation of run_dtrain.h on fork/execv, two pipes and poll().
//
// Everything the child needs (argv, the working directory) is prepared before fork(),
// so the child only calls async-signal-safe functions before execv(). The parent
// reads both pipes with poll() until they close, then reaps the child; both waits
// count against the one deadline. The child leads its own process group, so a kill
// at the deadline reaches anything it started, and PR_SET_PDEATHSIG kills it if the
// test process itself dies (e.g. killed by ctest's timeout), so no dtrain outlives
// its test.
#include "integration/run_dtrain.h"

#include <cstdlib>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#ifndef DTRAIN_BINARY
#error "DTRAIN_BINARY (the path of the dtrain executable) must be defined by the build"
#endif

namespace dtrain::integration {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kShownBytes = 6000;  // describe() shows at most this much of each stream

// `text`, or its last kShownBytes bytes.
std::string tail(const std::string& text) {
  if (text.size() <= kShownBytes) return text;
  return "[... " + std::to_string(text.size() - kShownBytes) + " bytes cut ...]" +
         text.substr(text.size() - kShownBytes);
}

std::string quote_args(const std::string& program, const std::vector<std::string>& args) {
  std::string line = program;
  for (const std::string& a : args) {
    const bool plain = !a.empty() && a.find_first_of(" \t\"'\\$") == std::string::npos;
    line += ' ';
    line += plain ? a : "'" + a + "'";
  }
  return line;
}

// Milliseconds left until `deadline` (0 when it has passed).
int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// Writes a message from the forked child, where only write() is safe.
void child_complain(const char* what, const char* arg) {
  const int error = errno;
  const char* parts[] = {"run_dtrain: ", what, " '", arg, "': ", std::strerror(error), "\n"};
  for (const char* p : parts) {
    if (::write(2, p, std::strlen(p)) < 0) break;
  }
}

// Reads what is available on `fd` into `sink`; returns false at end of file or error.
bool drain(int fd, std::string& sink) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      sink.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    return false;  // 0 = end of file; any other error ends the stream too
  }
}

}  // namespace

std::string describe(const RunOutput& r) {
  std::ostringstream s;
  s << "command: " << r.command << "\n";
  if (r.timed_out)
    s << "result: killed at the deadline";
  else if (r.signal != 0)
    s << "result: killed by signal " << r.signal << " (" << strsignal(r.signal) << ")";
  else
    s << "result: exit code " << r.exit_code;
  s << " after " << r.seconds << " s\n";
  s << "--- stdout ---\n" << tail(r.out) << "\n--- stderr ---\n" << tail(r.err) << "\n--- end ---";
  return s.str();
}

RunOutput run_program(const std::string& program, const std::vector<std::string>& args,
                      const RunSpec& spec) {
  RunOutput r;
  r.command = quote_args(program, args);

  std::vector<std::string> argv_strings;
  argv_strings.push_back(program);
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) FAIL("pipe2: " << std::strerror(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    FAIL("pipe2: " << std::strerror(errno));
  }

  const pid_t parent = ::getpid();
  const Clock::time_point start = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) FAIL("fork: " << std::strerror(errno));
  if (pid == 0) {
    // The child: own process group, die with the parent, pipes as stdout/stderr.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    // dup2() leaves the new descriptors without O_CLOEXEC; the pipe ends close at execv.
    if (::dup2(out_pipe[1], 1) < 0 || ::dup2(err_pipe[1], 2) < 0) ::_exit(127);
    if (cwd && ::chdir(cwd) != 0) {
      child_complain("cannot change to directory", cwd);
      ::_exit(127);
    }
    ::execv(argv[0], argv.data());
    child_complain("cannot execute", argv[0]);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from this side, so a kill(-pid) right away cannot miss
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  // Non-blocking reads: drain() stops at "nothing more for now" instead of waiting.
  for (int fd : {out_pipe[0], err_pipe[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);

  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec.deadline_seconds));
  struct Stream {
    int fd;
    std::string* sink;
  };
  std::vector<Stream> open_streams = {{out_pipe[0], &r.out}, {err_pipe[0], &r.err}};
  while (!open_streams.empty()) {
    const int wait_ms = ms_left(deadline);
    if (wait_ms == 0) {
      r.timed_out = true;
      break;
    }
    std::vector<pollfd> fds;
    for (const Stream& s : open_streams) fds.push_back({s.fd, POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), std::min(wait_ms, 200));
    if (ready < 0 && errno != EINTR) {
      r.timed_out = true;  // cannot watch the child any more: treat it as hung
      break;
    }
    for (size_t i = fds.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      if (!drain(open_streams[i].fd, *open_streams[i].sink)) {
        ::close(open_streams[i].fd);
        open_streams.erase(open_streams.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }

  // Both pipes closed (or the deadline passed): reap the child, still under the deadline.
  int status = 0;
  bool reaped = false;
  while (!r.timed_out) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      reaped = true;
      break;
    }
    if (done < 0 && errno != EINTR) FAIL("waitpid: " << std::strerror(errno));
    if (ms_left(deadline) == 0) {
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!reaped) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  for (const Stream& s : open_streams) {
    drain(s.fd, *s.sink);
    ::close(s.fd);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status) && !r.timed_out) r.signal = WTERMSIG(status);

  if (r.timed_out)
    FAIL(program << " did not finish within " << spec.deadline_seconds << " s and was killed\n"
                 << describe(r));
  if (r.signal != 0) FAIL(program << " crashed (killed by a signal)\n" << describe(r));
  return r;
}

std::string dtrain_binary() {
  // DTRAIN_TEST_BINARY: the binary when the tests run away from their build tree
  // (scripts/test-gpu.sh on a GPU machine, from a bundle).
  const char* binary = std::getenv("DTRAIN_TEST_BINARY");
  return binary && *binary ? binary : DTRAIN_BINARY;
}

RunOutput run_dtrain(const std::vector<std::string>& args, const RunSpec& spec) {
  return run_program(dtrain_binary(), args, spec);
}

void check_error(const RunOutput& r, int exit_code, const std::vector<std::string>& needles) {
  INFO(describe(r));
  CHECK(r.exit_code == exit_code);
  const bool has_error_line =
      r.err.rfind("dtrain: error: ", 0) == 0 || r.err.find("\ndtrain: error: ") != std::string::npos;
  CHECK(has_error_line);
  for (const std::string& needle : needles) CHECK_THAT(r.err, Catch::Matchers::Contains(needle));
}

}  // namespace dtrain::integration
