// Running several dtrain processes at once from a test: start_dtrain() starts the
// real binary in the background (fork + execve, its own process group, killed if the
// test process dies) with extra environment variables, and returns a handle. The
// child's stdout and stderr go to two unlinked temporary files, so any number of
// children can run side by side without a reader per pipe, and the test can look at
// what a child printed so far (e.g. wait for its "joined" line) while it runs.
// finish() waits for the end under a deadline: a child that overruns it is killed and
// the test FAILs. A handle that goes away before finish() (the test ended early, a
// FAIL unwound the stack) kills its child's process group and reaps it, so no child
// outlives its test. The blocking one-child API stays in run_dtrain.h.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "integration/run_dtrain.h"

namespace dtrain::integration {

struct StartSpec {
  // Changes to the test's own environment for this child: "NAME=value" sets NAME,
  // a bare "NAME" (no '=') removes it.
  std::vector<std::string> env;
  std::string cwd;  // working directory of the child; "" = the test's own
};

// One child started by start_program()/start_dtrain().
class Child {
 public:
  using Clock = std::chrono::steady_clock;

  Child(const std::string& program, const std::vector<std::string>& args, const StartSpec& spec);
  // Kills the process group and reaps the child if finish() did not.
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& command() const { return command_; }
  Clock::time_point start_time() const { return start_; }

  // What the child wrote so far.
  std::string out() const;
  std::string err() const;

  // True once the child has ended (it is reaped then; its status kept for finish()).
  bool ended();
  // Wait until stdout (stderr) holds `needle` (true), or the child ends or `seconds`
  // pass without it (false). Never FAIL: the caller decides what a miss means.
  bool wait_for_out(const std::string& needle, double seconds);
  bool wait_for_err(const std::string& needle, double seconds);
  // Sends `signal` to the child itself (not to a reaped pid).
  void send(int signal);

  // Waits at most `seconds` (from now) for the child to end and returns what it did.
  // FAILs the test, after killing the child, when the deadline passes; FAILs when
  // the child ended by a signal other than `expected_signal` (0: none expected).
  RunOutput finish(double seconds, int expected_signal = 0);
  // The time the child was reaped (valid once ended()).
  Clock::time_point end_time() const { return end_; }

 private:
  void kill_group_and_reap();
  bool wait_for(int fd, const std::string& needle, double seconds);

  std::string command_;
  pid_t pid_ = -1;
  int out_fd_ = -1;  // the temporary files (already unlinked), read with pread()
  int err_fd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  Clock::time_point start_, end_;
};

// Starts `program` with `args` (argv[1..]) in the background. FAILs the test when it
// cannot fork; an exec that fails shows as exit code 127 with the reason on stderr.
std::unique_ptr<Child> start_program(const std::string& program, const std::vector<std::string>& args,
                                     const StartSpec& spec = {});

// start_program() on the dtrain binary this build made (DTRAIN_BINARY).
std::unique_ptr<Child> start_dtrain(const std::vector<std::string>& args, const StartSpec& spec = {});

}  // namespace dtrain::integration
