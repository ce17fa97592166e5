// Implementation of start_dtrain.h on fork/execve, two unlinked temporary files and
// waitpid(WNOHANG) polling.
//
// The argv and the environment are built before fork(), so the child only calls
// async-signal-safe functions before execve(). Output goes to files rather than pipes
// because a test holds several children at once and reads them only now and then: a
// pipe that nobody drains would block a chatty child. The files are unlinked as soon
// as they are made (they vanish with the last descriptor) and read with pread(),
// which leaves the offset the child writes at untouched.
#include "integration/start_dtrain.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <thread>

#ifndef DTRAIN_BINARY
#error "DTRAIN_BINARY (the path of the dtrain executable) must be defined by the build"
#endif

extern char** environ;

namespace dtrain::integration {
namespace {

// An unlinked temporary file open for reading and writing (close-on-exec).
int anonymous_file() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/dtrain_child_XXXXXX";
  const int fd = ::mkostemp(pattern.data(), O_CLOEXEC);
  if (fd < 0) FAIL("mkostemp(" << pattern << "): " << std::strerror(errno));
  ::unlink(pattern.c_str());
  return fd;
}

std::string read_all(int fd) {
  std::string text;
  char buffer[65536];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
    at += n;
  }
  return text;
}

// The test's environment with `changes` applied (see StartSpec::env).
std::vector<std::string> child_environment(const std::vector<std::string>& changes) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  for (const std::string& change : changes) {
    const std::string name = change.substr(0, change.find('='));
    std::erase_if(env, [&](const std::string& entry) { return entry.compare(0, name.size() + 1, name + "=") == 0; });
    if (change.find('=') != std::string::npos) env.push_back(change);
  }
  return env;
}

// "NAME='value' ... program args", for messages (the changed variables only).
std::string command_line(const std::string& program, const std::vector<std::string>& args,
                         const std::vector<std::string>& changes) {
  std::string line;
  for (const std::string& change : changes) {
    const size_t eq = change.find('=');
    line += eq == std::string::npos ? "(unset " + change + ") " : change.substr(0, eq + 1) + "'" + change.substr(eq + 1) + "' ";
  }
  line += program;
  for (const std::string& a : args) line += a.find(' ') == std::string::npos && !a.empty() ? " " + a : " '" + a + "'";
  return line;
}

void child_complain(const char* what, const char* arg) {
  const char* parts[] = {"start_program: ", what, " '", arg, "': ", std::strerror(errno), "\n"};
  for (const char* p : parts) {
    if (::write(2, p, std::strlen(p)) < 0) break;
  }
}

}  // namespace

Child::Child(const std::string& program, const std::vector<std::string>& args, const StartSpec& spec)
    : command_(command_line(program, args, spec.env)) {
  std::vector<std::string> argv_strings{program};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = child_environment(spec.env);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();

  out_fd_ = anonymous_file();
  err_fd_ = anonymous_file();
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) FAIL("open(/dev/null): " << std::strerror(errno));

  const pid_t parent = ::getpid();
  start_ = Clock::now();
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(null_fd);
    FAIL("fork: " << std::strerror(errno));
  }
  if (pid_ == 0) {
    // The child: own process group, die with the test, files as stdout/stderr.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the test died before prctl took effect
    if (::dup2(null_fd, 0) < 0 || ::dup2(out_fd_, 1) < 0 || ::dup2(err_fd_, 2) < 0) ::_exit(127);
    if (cwd && ::chdir(cwd) != 0) {
      child_complain("cannot change to directory", cwd);
      ::_exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    child_complain("cannot execute", argv[0]);
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);  // also from this side, so a group kill right away cannot miss
  ::close(null_fd);
}

Child::~Child() {
  if (!reaped_) kill_group_and_reap();
  ::close(out_fd_);
  ::close(err_fd_);
}

std::string Child::out() const { return read_all(out_fd_); }
std::string Child::err() const { return read_all(err_fd_); }

bool Child::ended() {
  if (reaped_) return true;
  int status = 0;
  pid_t done;
  while ((done = ::waitpid(pid_, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (done != pid_) return false;
  reaped_ = true;
  status_ = status;
  end_ = Clock::now();
  return true;
}

bool Child::wait_for(int fd, const std::string& needle, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (;;) {
    if (read_all(fd).find(needle) != std::string::npos) return true;
    if (ended()) return read_all(fd).find(needle) != std::string::npos;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool Child::wait_for_out(const std::string& needle, double seconds) { return wait_for(out_fd_, needle, seconds); }
bool Child::wait_for_err(const std::string& needle, double seconds) { return wait_for(err_fd_, needle, seconds); }

void Child::send(int signal) {
  if (!reaped_) ::kill(pid_, signal);
}

void Child::kill_group_and_reap() {
  // The child leads its group; the zombie keeps the group id until it is reaped, so
  // the group kill cannot reach a recycled pid.
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  status_ = status;
  end_ = Clock::now();
}

RunOutput Child::finish(double seconds, int expected_signal) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  RunOutput r;
  r.command = command_;
  while (!ended()) {
    if (Clock::now() >= deadline) {
      r.timed_out = true;
      kill_group_and_reap();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(end_ - start_).count();
  r.out = out();
  r.err = err();
  if (WIFEXITED(status_)) r.exit_code = WEXITSTATUS(status_);
  if (WIFSIGNALED(status_) && !r.timed_out) r.signal = WTERMSIG(status_);
  if (r.timed_out) FAIL("the child did not end within " << seconds << " s and was killed\n" << describe(r));
  if (r.signal != expected_signal) {
    if (r.signal == 0) FAIL("the child was expected to end by signal " << expected_signal << "\n" << describe(r));
    FAIL("the child ended by an unexpected signal\n" << describe(r));
  }
  return r;
}

std::unique_ptr<Child> start_program(const std::string& program, const std::vector<std::string>& args,
                                     const StartSpec& spec) {
  return std::make_unique<Child>(program, args, spec);
}

std::unique_ptr<Child> start_dtrain(const std::vector<std::string>& args, const StartSpec& spec) {
  return start_program(DTRAIN_BINARY, args, spec);
}

}  // namespace dtrain::integration
