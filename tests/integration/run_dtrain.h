// Running the real dtrain binary from a test: run_dtrain() starts it as a child
// process (fork + execv, in its own process group, killed if the test process dies),
// collects its stdout and stderr separately through two pipes, and waits for it
// under a deadline. A child that outlives the deadline is killed and the test FAILs;
// a child that ends by a signal (a crash, an abort) FAILs the test too, since no
// input, however bad, may crash dtrain. check_error() checks the documented shape of
// a failure: exit code, "dtrain: error:" on stderr, and the words the message must hold.
#pragma once

#include <string>
#include <vector>

namespace dtrain::integration {

// What one child process did.
struct RunOutput {
  std::string command;  // the command line, for messages
  int exit_code = -1;  // the exit status; -1 when the child did not exit normally
  int signal = 0;      // the signal that ended the child, 0 when it exited normally
  bool timed_out = false;
  double seconds = 0.0;  // wall time from start to end
  std::string out;       // everything it wrote to stdout
  std::string err;       // everything it wrote to stderr
};

struct RunSpec {
  double deadline_seconds = 60.0;  // the child is killed (and the test fails) after this
  std::string cwd;                 // working directory of the child; "" = the test's own
};

// The command line and both outputs, for INFO/FAIL messages.
std::string describe(const RunOutput& r);

// Runs `program` with `args` (argv[1..]). FAILs the test when the deadline passes or
// the child is killed by a signal; otherwise returns what it did.
RunOutput run_program(const std::string& program, const std::vector<std::string>& args,
                      const RunSpec& spec = {});

// The dtrain binary the tests run: $DTRAIN_TEST_BINARY when set (tests run away from
// their build tree), else the one this build made (DTRAIN_BINARY).
std::string dtrain_binary();

// run_program() on dtrain_binary().
RunOutput run_dtrain(const std::vector<std::string>& args, const RunSpec& spec = {});

// Checks a failed run: `exit_code`, stderr has a line starting "dtrain: error: ",
// and each of `needles` occurs in stderr.
void check_error(const RunOutput& r, int exit_code, const std::vector<std::string>& needles);

}  // namespace dtrain::integration
