// lib/launch's process machinery with small shell children: exit codes and signals,
// both pipes, the process group (a grandchild dies with its task), PR_SET_PDEATHSIG
// (a task dies with a launcher that is killed), the one inherited descriptor,
// waits under a deadline, an exec that fails; and the line splitter.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <fstream>
#include <string>
#include <thread>

#include "launch/process.h"
#include "launch/task_output.h"

using namespace dtrain::launch;

namespace {

std::unique_ptr<Process> shell(const std::string& script, int inherit_fd = -1) {
  SpawnSpec spec;
  spec.program = "/bin/sh";
  spec.argv = {"sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.inherit_fd = inherit_fd;
  return Process::spawn(spec);
}

// Everything on `fd` until end of file, within 10 s.
std::string read_all(UniqueFd fd) {
  std::string out;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  char buffer[4096];
  while (Clock::now() < deadline) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      return out;
    } else if (errno == EAGAIN || errno == EINTR) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } else {
      break;
    }
  }
  FAIL("the pipe did not reach end of file: " << out);
  return out;
}

// True once no process `pid` is left (gone, or a zombie nobody has reaped yet), within 5 s.
bool gone(pid_t pid) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!stat || !std::getline(stat, line)) return true;
    const size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z')
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

Clock::time_point in_seconds(double s) {
  return Clock::now() + std::chrono::milliseconds(static_cast<int>(s * 1000));
}

}  // namespace

TEST_CASE("a child's stdout, stderr and exit code come back separately", "[unit]") {
  auto p = shell("echo out1; echo err1 >&2; echo out2; exit 3");
  CHECK(read_all(p->take_stdout()) == "out1\nout2\n");
  CHECK(read_all(p->take_stderr()) == "err1\n");
  REQUIRE(p->wait_until(in_seconds(10)));
  CHECK(p->status().code == 3);
  CHECK(p->status().signal == 0);
  CHECK_FALSE(p->status().ok());
  CHECK(p->status().str() == "exit code 3");
}

TEST_CASE("a child leads its own process group and reads /dev/null", "[unit]") {
  auto p = shell("read line; echo \"read=$?\"; exit 0");
  CHECK(::getpgid(p->pid()) == p->pid());
  CHECK(read_all(p->take_stdout()) == "read=1\n");  // end of file at once
  REQUIRE(p->wait_until(in_seconds(10)));
  CHECK(p->status().ok());
}

TEST_CASE("a signal to the group ends the child, and its status says which", "[unit]") {
  auto p = shell("sleep 30");
  CHECK_FALSE(p->wait_until(in_seconds(0.2)));  // the deadline passes; the child lives
  CHECK_FALSE(p->reaped());
  p->signal_group(SIGTERM);
  REQUIRE(p->wait_until(in_seconds(10)));
  CHECK(p->status().signal == SIGTERM);
  CHECK(p->status().code == -1);
  CHECK(p->status().str() == "signal 15 (SIGTERM)");
}

TEST_CASE("what a task started dies when the task is reaped", "[unit]") {
  auto p = shell("sleep 60 >/dev/null 2>&1 & echo $!; exit 0");
  const pid_t grandchild = std::stoi(read_all(p->take_stdout()));
  REQUIRE(p->wait_until(in_seconds(10)));
  CHECK(p->status().ok());
  CHECK(gone(grandchild));
}

TEST_CASE("destroying a Process kills and reaps its group", "[unit]") {
  pid_t pid = 0;
  {
    auto p = shell("sleep 60");
    pid = p->pid();
  }
  CHECK(gone(pid));
  CHECK(::waitpid(pid, nullptr, WNOHANG) < 0);  // already reaped: not our child any more
}

TEST_CASE("a task dies with its launcher (PR_SET_PDEATHSIG)", "[unit]") {
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {  // a stand-in launcher: start a task, say its pid, die without cleanup
    auto p = shell("sleep 60");
    const pid_t task = p->pid();
    if (::write(report[1], &task, sizeof task) != sizeof task) ::_exit(2);
    ::_exit(0);
  }
  ::close(report[1]);
  pid_t task = 0;
  REQUIRE(::read(report[0], &task, sizeof task) == sizeof task);
  ::close(report[0]);
  int status = 0;
  REQUIRE(::waitpid(launcher, &status, 0) == launcher);
  CHECK(gone(task));
}

TEST_CASE("only the named descriptor crosses exec", "[unit]") {
  const int kept = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int other = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(kept > 2);
  auto p = shell("for fd in " + std::to_string(kept) + " " + std::to_string(other) +
                     "; do if [ -e /proc/self/fd/$fd ]; then echo open; else echo closed; fi; done",
                 kept);
  CHECK(read_all(p->take_stdout()) == "open\nclosed\n");
  REQUIRE(p->wait_until(in_seconds(10)));
  // The launcher's copy keeps close-on-exec.
  CHECK((::fcntl(kept, F_GETFD) & FD_CLOEXEC) != 0);
  ::close(kept);
  ::close(other);
}

TEST_CASE("a program that cannot be executed exits 127 and says why", "[unit]") {
  SpawnSpec spec;
  spec.program = "/nonexistent/dtrain";
  spec.argv = {"dtrain"};
  auto p = Process::spawn(spec);
  const std::string err = read_all(p->take_stderr());
  REQUIRE(p->wait_until(in_seconds(10)));
  CHECK(p->status().code == 127);
  CHECK_THAT(err, Catch::Matchers::Contains("cannot execute '/nonexistent/dtrain'"));
}

TEST_CASE("signal names", "[unit]") {
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(signal_name(63) == "signal 63");
}

TEST_CASE("the line splitter keeps partial lines until their newline", "[unit]") {
  LineSplitter s;
  std::vector<std::string> lines;
  auto collect = [&lines](std::string_view l) { lines.emplace_back(l); };
  s.feed("a", collect);
  s.feed("b\nc\n\nd", collect);
  CHECK(lines == std::vector<std::string>{"ab", "c", ""});
  s.feed("e\n", collect);
  s.feed("tail", collect);
  s.finish(collect);
  CHECK(lines == std::vector<std::string>{"ab", "c", "", "de", "tail"});
  s.finish(collect);  // nothing left
  CHECK(lines.size() == 5);
}

TEST_CASE("the line splitter cuts a line that never ends", "[unit]") {
  LineSplitter s;
  std::vector<std::string> lines;
  auto collect = [&lines](std::string_view l) { lines.emplace_back(l); };
  s.feed(std::string(LineSplitter::kMaxLine + 10, 'x'), collect);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].size() == LineSplitter::kMaxLine + 10);
  s.feed("y\n", collect);
  CHECK(lines.back() == "y");
}
