// Implementation of process.h on fork/execve, pipe2, waitid and kill(-pgid).
//
// Everything the child needs (argv, envp, the descriptors) is prepared before fork(),
// so that between fork() and execve() the child only calls async-signal-safe
// functions. The child undoes what the launcher set up for itself: the signal mask
// and the signals it ignores (SIGPIPE) are reset, since both survive execve.
#include "launch/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::launch {
namespace {

// Writes a message from the forked child, where only write() is safe.
void child_complain(const char* what, const char* arg, int error) {
  const char* parts[] = {"dtrain launch: ", what, " '", arg, "': ", std::strerror(error), "\n"};
  for (const char* p : parts)
    if (::write(2, p, std::strlen(p)) < 0) break;
}

// The child's side of spawn(): never returns.
[[noreturn]] void become_child(const SpawnSpec& spec, char* const* argv, char* const* envp,
                               pid_t parent, int in_fd, int out_fd, int err_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before prctl() took effect; then nobody would kill us.
  if (::getppid() != parent) ::_exit(127);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1}) ::signal(s, SIG_DFL);
  if (in_fd >= 0) {
    if (::dup2(in_fd, 0) < 0) ::_exit(127);
  } else {
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0 && null_fd != 0) {
      ::dup2(null_fd, 0);
      ::close(null_fd);
    }
  }
  // dup2() leaves 1 and 2 without FD_CLOEXEC; the pipe ends themselves close at exec.
  if (::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) ::_exit(127);
  if (spec.inherit_fd >= 0 && ::fcntl(spec.inherit_fd, F_SETFD, 0) != 0) {
    child_complain("cannot pass on descriptor", "inherit_fd", errno);
    ::_exit(127);
  }
  ::execve(spec.program.c_str(), argv, envp);
  child_complain("cannot execute", spec.program.c_str(), errno);
  ::_exit(127);
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGTERM:
      return "SIGTERM";
    default:
      return dtrain::str("signal ", signal);
  }
}

std::string ExitStatus::str() const {
  if (signal != 0) return dtrain::str("signal ", signal, " (", signal_name(signal), ")");
  return dtrain::str("exit code ", code);
}

std::unique_ptr<Process> Process::spawn(const SpawnSpec& spec) {
  DT_CHECK(!spec.argv.empty(), "a process needs argv[0]");
  DT_CHECK(spec.inherit_fd < 0 || spec.inherit_fd > 2, "inherit_fd ", spec.inherit_fd,
           " would be replaced by stdin/stdout/stderr");
  const std::vector<char*> argv = c_strings(spec.argv);
  const std::vector<char*> envp = c_strings(spec.env);

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    throw RuntimeError(str("cannot create a pipe for ", spec.argv[0], ": ", std::strerror(errno)));
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw RuntimeError(str("cannot create a pipe for ", spec.argv[0], ": ", std::strerror(errno)));
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);
  UniqueFd in_read, in_write;
  if (spec.stdin_pipe) {
    DT_CHECK(spec.stdin_text.size() <= PIPE_BUF, "stdin_text of ", spec.stdin_text.size(), " bytes");
    int in_pipe[2];
    if (::pipe2(in_pipe, O_CLOEXEC) != 0)
      throw RuntimeError(str("cannot create a pipe for ", spec.argv[0], ": ", std::strerror(errno)));
    in_read.reset(in_pipe[0]);
    in_write.reset(in_pipe[1]);
    if (!spec.stdin_text.empty() &&
        ::write(in_write.get(), spec.stdin_text.data(), spec.stdin_text.size()) !=
            static_cast<ssize_t>(spec.stdin_text.size()))
      throw RuntimeError(str("cannot write ", spec.argv[0], "'s standard input: ", std::strerror(errno)));
  }

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0)
    throw RuntimeError(str("cannot start ", spec.argv[0], ": fork: ", std::strerror(errno)));
  if (pid == 0)
    become_child(spec, argv.data(), envp.data(), parent, in_read.get(), out_write.get(), err_write.get());

  // Also from this side, so that a signal to the group right away cannot miss
  // (EACCES once the child has exec'd is fine: it has done it itself).
  ::setpgid(pid, pid);
  std::unique_ptr<Process> p(new Process());
  p->pid_ = pid;
  for (int fd : {out_read.get(), err_read.get()})
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  p->stdout_ = std::move(out_read);
  p->stderr_ = std::move(err_read);
  p->stdin_ = std::move(in_write);
  return p;  // the write ends close here: the pipes reach end of file when the child is gone
}

Process::~Process() { kill_and_reap(); }

void Process::kill_and_reap() {
  if (reaped_ || pid_ <= 0) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  reap_now();
}

void Process::reap_now() {
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  stdin_.reset();
  if (WIFEXITED(status)) status_.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) status_.signal = WTERMSIG(status);
}

bool Process::poll_exit() {
  if (reaped_) return true;
  siginfo_t info{};
  // WNOWAIT: look without reaping, so the zombie keeps holding the process group id
  // while the rest of the group (anything the task started) is killed.
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == EINTR) return false;
    throw RuntimeError(str("waitid for process ", pid_, ": ", std::strerror(errno)));
  }
  if (info.si_pid == 0) return false;  // still running
  ::kill(-pid_, SIGKILL);
  reap_now();
  return true;
}

void Process::signal_group(int signal) {
  if (reaped_) return;
  // The leader is alive or a zombie, so the group id is still ours.
  if (::kill(-pid_, signal) != 0) ::kill(pid_, signal);
}

bool Process::wait_until(Clock::time_point deadline) {
  while (!poll_exit()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace dtrain::launch
