// Child processes for `dtrain launch`: spawn with pipes, own process group, death
// with the parent, group signals, and reaping under a deadline.
//
// A Process is started with fork + execve. The child leads its own process group
// (so a signal to the group reaches anything it started and a Ctrl-C on the
// launcher's terminal does not), asks the kernel to SIGKILL it when the thread that
// spawned it dies (PR_SET_PDEATHSIG, checked against getppid() to close the race
// with a parent that died first), reads /dev/null as stdin and writes stdout and
// stderr to two pipes whose read ends the caller polls. Spawn from a thread that
// lives as long as the job (the main thread): PDEATHSIG fires when that thread ends.
// (A child may instead read a pipe as stdin: SpawnSpec::stdin_pipe.)
// Reaping first checks for an exit without reaping (waitid WNOWAIT), kills whatever
// is left in the group while the zombie still holds the group id, then reaps, so no
// descendant outlives its task and no recycled pid is ever signalled.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::launch {

using Clock = std::chrono::steady_clock;

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// How a process ended.
struct ExitStatus {
  int code = -1;   // the exit status when it exited normally, else -1
  int signal = 0;  // the signal that ended it, else 0
  bool ok() const { return signal == 0 && code == 0; }
  std::string str() const;  // "exit code 4", "signal 9 (SIGKILL)"
};

// "SIGKILL" for 9, ... ("signal 42" for one without a name here).
std::string signal_name(int signal);

struct SpawnSpec {
  std::string program;            // the file to execute, e.g. "/proc/self/exe"
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // the whole environment, "NAME=value" each
  int inherit_fd = -1;            // a descriptor (> 2) the child keeps across exec, or -1
  // stdin: /dev/null, or (stdin_pipe) a pipe that first carries `stdin_text` and
  // then stays open until the child is reaped: the child sees end of file when the
  // launcher is done with it or dies (a remote task's watchdog, remote_task.h).
  // The text travels on the pipe, never on a command line or in the environment.
  bool stdin_pipe = false;
  std::string stdin_text;  // at most PIPE_BUF bytes (written at once, never blocks)
};

// One running (or finished) child. The destructor kills the group and reaps it if
// that has not happened yet.
class Process {
 public:
  // Starts the child. Throws RuntimeError when pipes or fork fail. An exec that fails
  // is reported by the child on its stderr, and it exits with code 127.
  static std::unique_ptr<Process> spawn(const SpawnSpec& spec);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }  // also the process group id
  // The read ends of the child's stdout and stderr (non-blocking, close-on-exec).
  // The caller takes them once (e.g. into a poll loop) and closes them at end of file.
  UniqueFd take_stdout() { return std::move(stdout_); }
  UniqueFd take_stderr() { return std::move(stderr_); }

  // Reaps the child if it has exited (never blocks). Returns true once reaped.
  bool poll_exit();
  bool reaped() const { return reaped_; }
  const ExitStatus& status() const { return status_; }  // meaningful once reaped

  // Closes the write end of a stdin pipe (SpawnSpec::stdin_pipe): the child reads end of file.
  void close_stdin() { stdin_.reset(); }

  // Sends `signal` to the child's whole process group; does nothing once reaped.
  void signal_group(int signal);
  // SIGKILL to the group, then reaps (SIGKILL cannot be caught: this returns promptly).
  void kill_and_reap();
  // Waits until the child is reaped or `deadline` passes; returns reaped().
  bool wait_until(Clock::time_point deadline);

 private:
  Process() = default;
  void reap_now();

  pid_t pid_ = -1;
  bool reaped_ = false;
  ExitStatus status_;
  UniqueFd stdout_;
  UniqueFd stderr_;
  UniqueFd stdin_;  // the write end of a stdin pipe (SpawnSpec::stdin_pipe), closed once reaped
};

}  // namespace dtrain::launch
