// --hostfile's pieces: the hostfile format (DeepSpeed/MPI "host slots=N"), the
// cluster its slots make, and the remote script run through a real `sh` (the job
// secret read from standard input, the task's variables and arguments quoted, the
// watchdog that stops the task when standard input ends). The ssh transport itself
// runs in tests/integration/test_hostfile.cpp.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>

#include "core/error.h"
#include "launch/hostfile.h"
#include "launch/process.h"
#include "launch/remote_task.h"
#include "support/temp_dir.h"

using namespace dtrain;
using namespace dtrain::launch;
using Catch::Matchers::Contains;

namespace {

std::string write_hostfile(const test::TempDir& dir, const std::string& text) {
  const std::string path = dir.file("hostfile");
  std::ofstream(path) << text;
  return path;
}

std::string hostfile_error(const std::string& text) {
  test::TempDir dir;
  try {
    read_hostfile(write_hostfile(dir, text));
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError for:\n" << text);
  return "";
}

// Everything `process` wrote on a pipe until it ended.
std::string drain(UniqueFd fd) {
  std::string out;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n > 0) out.append(buffer, static_cast<size_t>(n));
    else if (n == 0 || errno != EAGAIN) break;
    else ::usleep(10000);
  }
  return out;
}

}  // namespace

TEST_CASE("a hostfile lists hosts with slots, comments, blank lines and users are allowed", "[hostfile]") {
  test::TempDir dir;
  const auto hosts = read_hostfile(write_hostfile(dir, "# the job's hosts\n\nnode1 slots=2\n  deploy@node2   # one slot\nnode3 slots=3\n"));
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].host == "node1");
  CHECK(hosts[0].slots == 2);
  CHECK(hosts[1].target == "deploy@node2");
  CHECK(hosts[1].host == "node2");
  CHECK(hosts[1].slots == 1);
  CHECK(hosts[2].line == 5);
  const ClusterPlan plan = plan_hostfile_cluster(hosts, 8888, "--hostfile");
  CHECK(plan.spec.tasks.at("worker") ==
        std::vector<std::string>{"node1:8888", "node1:8889", "node2:8888", "node3:8888", "node3:8889", "node3:8890"});
  CHECK(plan.spec.chief() == config::TaskId{"worker", 0});
  const auto slots = remote_slots(hosts);
  REQUIRE(slots.size() == 6);
  CHECK(slots[3].host->host == "node3");
  CHECK(slots[5].local_rank == 2);
}

TEST_CASE("a bad hostfile names the file and line", "[hostfile]") {
  CHECK_THAT(hostfile_error("node1 slots=0\n"), Contains("hostfile:1: 'slots=0'") && Contains("positive number"));
  CHECK_THAT(hostfile_error("node1\nnode2 cpus=4\n"), Contains("hostfile:2: 'cpus=4'"));
  CHECK_THAT(hostfile_error("node1\nroot@node1 slots=2\n"), Contains("hostfile:2: node1 is listed twice"));
  CHECK_THAT(hostfile_error("# nothing\n"), Contains("lists no hosts"));
  CHECK_THROWS_WITH(plan_hostfile_cluster({{"n", "n", 4, 1}}, 65533, "--hostfile"), Contains("--port-base 65533"));
}

TEST_CASE("the remote script takes the secret from stdin and runs the task with its variables", "[hostfile]") {
  RemoteShell shell;
  shell.dtrain = "/bin/sh";  // a stand-in task: prints what it got
  shell.cwd = "/tmp";
  const std::string script = remote_script(
      shell, {"TF_CONFIG={\"task\": {\"type\": \"worker\", \"index\": 1}}", "LOCAL_RANK=1"},
      {"-c", "echo \"$PWD|$DTRAIN_JOB_SECRET|$TF_CONFIG|$LOCAL_RANK|$1\"", "sh", "it's quoted"});
  SpawnSpec spec;
  spec.program = "/bin/sh";
  spec.argv = {"sh", "-c", script};
  spec.stdin_pipe = true;
  spec.stdin_text = "s3cret\n";
  auto p = Process::spawn(spec);
  UniqueFd out = p->take_stdout();
  // The task ended by itself; the script's status is the task's.
  REQUIRE(p->wait_until(Clock::now() + std::chrono::seconds(10)));
  CHECK(p->status().ok());
  CHECK(drain(std::move(out)) == "/tmp|s3cret|{\"task\": {\"type\": \"worker\", \"index\": 1}}|1|it's quoted\n");
  // The secret is not in the script (nor, so, on ssh's command line).
  CHECK(script.find("s3cret") == std::string::npos);
}

TEST_CASE("the remote task is stopped when its standard input ends", "[hostfile]") {
  RemoteShell shell;
  shell.dtrain = "/bin/sleep";
  shell.grace = 1;
  SpawnSpec spec;
  spec.program = "/bin/sh";
  spec.argv = {"sh", "-c", remote_script(shell, {}, {"600"})};
  spec.stdin_pipe = true;
  spec.stdin_text = "secret\n";
  auto p = Process::spawn(spec);
  ::usleep(300000);
  CHECK_FALSE(p->poll_exit());  // the task runs while the launcher holds on
  // The launcher lets go (on the remote host, a closed ssh connection looks the same).
  const auto start = Clock::now();
  p->close_stdin();
  REQUIRE(p->wait_until(Clock::now() + std::chrono::seconds(10)));
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 3.0);
  CHECK(p->status().code == 128 + 15);  // the task ended by SIGTERM; the script passes that on
}
