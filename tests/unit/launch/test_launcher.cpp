// launch_cluster() with a shell script standing in for `dtrain run`, so the launcher's
// own logic is tested apart from training: what each task is given (argv, TF_CONFIG,
// the secret, the job id, the chief's listening socket, DTRAIN_INJECT), the prefixed
// and logged output, the agreement report, exit codes and the table, the stopping
// sequence (grace, SIGTERM, SIGKILL for a task that ignores SIGTERM), and SIGINT.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "launch/launcher.h"
#include "launch/task_output.h"

using namespace dtrain;
using namespace dtrain::launch;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// FAKE_MODE: ok (write a summary, exit 0), wait (sleep), stubborn (ignore SIGTERM
// and sleep); FAKE_FAIL_TASK exits FAKE_FAIL_CODE (3) at once, in a restarted job
// (--set checkpoint.resume=auto) only with FAKE_FAIL_AGAIN; DTRAIN_INJECT kills the
// task itself.
const char* const kFakeRun = R"SH(#!/bin/sh
summary=""
args="$*"
while [ $# -gt 0 ]; do [ "$1" = "--summary" ] && summary="$2"; shift; done
task=$(echo "$TF_CONFIG" | sed 's/.*"type": "\([a-z]*\)", "index": \([0-9]*\).*/\1:\2/')
echo "args $args"
echo "env TF_CONFIG=$TF_CONFIG"
echo "env LISTEN_FD=${DTRAIN_LISTEN_FD:-none} JOB=$DTRAIN_JOB_ID SECRET=$DTRAIN_JOB_SECRET INJECT=${DTRAIN_INJECT:-none}"
if [ -n "$DTRAIN_LISTEN_FD" ] && [ -e /proc/self/fd/$DTRAIN_LISTEN_FD ]; then echo "listen fd open"; fi
echo "dtrain: rendezvous: all $FAKE_TASKS tasks joined and agree" >&2
echo "[$task] dtrain: warning: a warning from $task" >&2
printf 'partial'; sleep 0.05; printf ' line\n'
case "$DTRAIN_INJECT" in kill@*) kill -9 $$ ;; esac
case "$args" in *checkpoint.resume=auto*) [ -z "$FAKE_FAIL_AGAIN" ] && FAKE_FAIL_TASK="" ;; esac
[ "$task" = "$FAKE_FAIL_TASK" ] && { echo "dtrain: error: failing on purpose" >&2; exit ${FAKE_FAIL_CODE:-3}; }
case "$FAKE_MODE" in
  ok) echo "{\"task\": \"$task\"}" > "$summary"; exit 0 ;;
  wait) sleep 30 ;;
  stubborn) trap '' TERM; sleep 30 ;;
esac
)SH";

// The arguments `dtrain launch` would give `dtrain run` (the launcher takes them
// from its caller): a restarted job resumes from its checkpoint.
std::function<std::vector<std::string>(const TaskStart&)> run_args(const std::string& config,
                                                                  std::vector<std::string> overrides = {}) {
  return [config, overrides](const TaskStart& start) {
    std::vector<std::string> args = {"run", "--config", config};
    for (const auto& o : overrides) args.insert(args.end(), {"--set", o});
    if (start.restart > 0) args.insert(args.end(), {"--set", "checkpoint.resume=auto"});
    args.insert(args.end(), {"--summary", start.summary_path});
    if (start.threads > 0) args.insert(args.end(), {"--threads", std::to_string(start.threads)});
    return args;
  };
}

struct Fixture {
  std::string dir;
  std::string program, config, out_path, err_path;
  int out_fd = -1, err_fd = -1;

  Fixture() {
    std::string pattern = (fs::temp_directory_path() / "dtrain_launch_XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
    program = dir + "/fake_run.sh";
    std::ofstream(program) << kFakeRun;
    ::chmod(program.c_str(), 0755);
    config = dir + "/job.json";
    std::ofstream(config)
        << R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 2}]},
      "loss": "sparse_categorical_crossentropy", "optimizer": "sgd", "train": {"epochs": 1},
      "data": {"train": {"format": "synthetic", "shape": [4], "count": 8, "classes": 2}},
      "output": {"dir": ")"
        << dir << R"(/out"}})";
    out_path = dir + "/stdout";
    err_path = dir + "/stderr";
    out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ::unsetenv("FAKE_FAIL_TASK");
    ::unsetenv("FAKE_FAIL_CODE");
    ::unsetenv("FAKE_FAIL_AGAIN");
  }
  ~Fixture() {
    ::close(out_fd);
    ::close(err_fd);
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  LaunchOptions options(int workers, const std::string& mode) const {
    ::setenv("FAKE_MODE", mode.c_str(), 1);
    LaunchOptions o;
    o.job.output_dir = dir + "/out";
    o.task_args = run_args(config);
    o.cluster.workers = workers;
    o.program = program;
    o.stdout_fd = out_fd;
    o.stderr_fd = err_fd;
    o.grace_period = 0.5;
    o.all_task_lines = true;  // (the default console shows the chief's lines only: its own test)
    return o;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string out() const { return read(out_path); }
  std::string err() const { return read(err_path); }
};

void set_tasks(int n) { ::setenv("FAKE_TASKS", std::to_string(n).c_str(), 1); }

}  // namespace

TEST_CASE("every task gets its TF_CONFIG, the job's secret and id, the chief its socket",
          "[unit]") {
  Fixture f;
  set_tasks(4);
  LaunchOptions o = f.options(2, "ok");
  o.cluster.chief = true;
  o.cluster.ps = 1;
  o.task_args = run_args(f.config, {"train.epochs=2"});
  o.threads = 3;
  const LaunchReport r = launch_cluster(o);
  INFO(f.out() << f.err());
  CHECK(r.exit_code == 0);
  CHECK(r.first_failure.empty());
  CHECK(r.cluster_up_seconds >= 0.0);
  CHECK(r.job_id.rfind("launch-", 0) == 0);
  REQUIRE(r.tasks.size() == 4);
  const std::string out = f.out();
  for (const TaskReport& t : r.tasks) {
    const std::string name = t.task.str();
    const std::string p = "[" + name + "] ";
    CHECK(t.status.ok());
    CHECK(t.summary_json == "{\"task\": \"" + name + "\"}\n");
    CHECK_THAT(out,
               Contains(p + "args run --config " + f.config + " --set train.epochs=2 --summary "));
    CHECK_THAT(out, Contains(" --threads 3\n"));
    CHECK_THAT(out, Contains(p + "env TF_CONFIG={\"cluster\": {"));
    CHECK_THAT(out, Contains("\"task\": {\"type\": \"" + t.task.type +
                             "\", \"index\": " + std::to_string(t.task.index) + "}}"));
    CHECK_THAT(out, Contains(p + "partial line\n"));
    const bool serves = name == "chief:0" || t.task.type == "ps";  // the rendezvous store, the variables
    CHECK_THAT(out, Contains(p + "env LISTEN_FD=" + (serves ? "" : "none")));
    CHECK_THAT(out, Contains(" JOB=" + r.job_id + " "));
    const std::string log = Fixture::read(t.log_path);
    CHECK(t.log_path ==
          f.dir + "/out/logs/" + t.task.type + "-" + std::to_string(t.task.index) + ".log");
    CHECK_THAT(log, Contains("partial line\n"));  // stdout ...
    CHECK_THAT(log,
               Contains("dtrain: rendezvous: all 4 tasks joined and agree\n"));  // ... and stderr
    CHECK(log.find("[" + name + "]") == std::string::npos);  // no prefix in its own log
  }
  CHECK_THAT(out, Contains("[chief:0] listen fd open"));
  CHECK(out.find("[worker:0] listen fd open") == std::string::npos);
  CHECK_THAT(f.err(), Contains("dtrain: launch: all 4 tasks past the agreement barrier in "));
  CHECK_THAT(f.err(), Contains("[ps:0] dtrain: rendezvous: all 4 tasks joined and agree"));
  // One generated secret (64 hex digits) shared by all.
  const size_t at = out.find("SECRET=");
  REQUIRE(at != std::string::npos);
  const std::string secret = out.substr(at + 7, out.find(' ', at) - at - 7);
  CHECK(secret.size() == 64);
  size_t count = 0;
  for (size_t i = out.find("SECRET=" + secret); i != std::string::npos;
       i = out.find("SECRET=" + secret, i + 1))
    ++count;
  CHECK(count == 4);
}

TEST_CASE("a secret already in the environment is passed on", "[unit]") {
  Fixture f;
  set_tasks(1);
  LaunchOptions o = f.options(1, "ok");
  o.job_secret = "given-secret";  // the launcher's DTRAIN_JOB_SECRET
  const LaunchReport r = launch_cluster(o);
  CHECK(r.exit_code == 0);
  CHECK_THAT(f.out(), Contains("SECRET=given-secret INJECT=none"));
}

TEST_CASE("an injected kill fails the job and the others are stopped after the grace", "[unit]") {
  Fixture f;
  set_tasks(3);
  LaunchOptions o = f.options(3, "wait");
  o.injections = {"kill:worker:1@step=3"};
  const auto start = Clock::now();
  const LaunchReport r = launch_cluster(o);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  INFO(f.out() << f.err());
  CHECK(seconds < 10.0);
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK(r.first_failure == "worker:1");
  CHECK(r.tasks[1].status.signal == SIGKILL);
  CHECK(r.tasks[1].injection == "kill@step=3");
  CHECK_FALSE(r.tasks[1].stopped);
  CHECK_THAT(f.out(), Contains("[worker:1] env LISTEN_FD=none") && Contains("INJECT=kill@step=3"));
  for (int i : {0, 2}) {
    CHECK(r.tasks[i].status.signal == SIGTERM);
    CHECK(r.tasks[i].stopped);
    CHECK(r.tasks[i].exit_seconds >= r.tasks[1].exit_seconds + 0.4);  // after the grace
  }
  const std::string err = f.err();
  CHECK_THAT(err, Contains("worker:1 ended with signal 9 (SIGKILL)"));
  CHECK_THAT(err, Contains("worker:1  signal 9 (SIGKILL)    killed by the injected fault "
                           "kill@step=3   <- first failure"));
  CHECK_THAT(err, Contains("worker:0  signal 15 (SIGTERM)   stopped by the launcher"));
  CHECK(format_exit_table(r) == err.substr(err.find("dtrain: launch: root cause: ")));
  // The root cause comes first: the first failure, when, where, its log.
  CHECK_THAT(err, Contains("dtrain: launch: root cause: worker:1 (127.0.0.1:"));
  CHECK_THAT(err, Contains(") ended with signal 9 (SIGKILL) at 20"));  // its UTC time
  CHECK_THAT(err, Contains("dtrain: launch:   its last error: (none on its stderr)"));
  CHECK_THAT(err, Contains("dtrain: launch:   its log: " + r.tasks[1].log_path));
  CHECK(err.find("root cause:") < err.find("how each task ended"));
}

TEST_CASE("a task that ignores SIGTERM is killed one grace period later", "[unit]") {
  Fixture f;
  set_tasks(2);
  ::setenv("FAKE_FAIL_TASK", "worker:0", 1);
  const LaunchReport r = launch_cluster(f.options(2, "stubborn"));
  ::unsetenv("FAKE_FAIL_TASK");
  INFO(f.out() << f.err());
  CHECK(r.exit_code == 3);  // the first failure's own code
  CHECK(r.first_failure == "worker:0");
  CHECK(r.tasks[0].status.code == 3);
  CHECK(r.tasks[1].status.signal == SIGKILL);
  CHECK(r.tasks[1].stopped);
  CHECK(r.tasks[1].exit_seconds >= r.tasks[0].exit_seconds + 0.9);
  CHECK_THAT(f.err(), Contains("dtrain: error: [worker:0] failing on purpose"));
  CHECK_THAT(f.err(), Contains("dtrain: launch:   its last error: dtrain: error: failing on purpose"));
  CHECK(r.tasks[0].last_error == "dtrain: error: failing on purpose");
  CHECK_THAT(f.err(), Contains("sent SIGTERM to the 1 task still running"));
  CHECK_THAT(f.err(), Contains("sent SIGKILL to the 1 task still running"));
  CHECK_THAT(f.err(), Contains("data or file error   <- first failure"));
}

TEST_CASE("SIGINT to the launcher stops every task and gives 130", "[unit]") {
  Fixture f;
  set_tasks(2);
  struct sigaction before {};
  ::sigaction(SIGINT, nullptr, &before);
  std::jthread interrupter([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    ::kill(::getpid(), SIGINT);
  });
  const LaunchReport r = launch_cluster(f.options(2, "wait"));
  interrupter.join();
  INFO(f.out() << f.err());
  CHECK(r.exit_code == 130);
  CHECK(r.interrupted_by == SIGINT);
  for (const TaskReport& t : r.tasks) {
    CHECK(t.status.signal == SIGINT);  // (passed on as Ctrl-C: a dtrain task stops at a step's end, exit 130)
    CHECK(t.stopped);
    CHECK(::kill(t.pid, 0) != 0);  // reaped: no such process
  }
  CHECK_THAT(f.err(), Contains("got SIGINT"));
  CHECK_THAT(f.err(), Contains("stopped by SIGINT"));
  // The handler from before the launch is back.
  struct sigaction now {};
  ::sigaction(SIGINT, nullptr, &now);
  CHECK(now.sa_handler == before.sa_handler);
}

TEST_CASE("problems found before any task starts are ConfigErrors", "[unit]") {
  Fixture f;
  LaunchOptions o = f.options(2, "ok");
  o.injections = {"kill:worker:9@step=1"};
  CHECK_THROWS_WITH(launch_cluster(o), Contains("worker:9 is not a task"));
  o.injections = {};
  o.grace_period = -1;
  CHECK_THROWS_AS(launch_cluster(o), ConfigError);
  o = f.options(0, "ok");
  CHECK_THROWS_WITH(launch_cluster(o), Contains("--workers N"));
  CHECK(f.out().empty());
}

TEST_CASE("a failed job is started again with checkpoint.resume=auto and without the fault",
          "[unit]") {
  Fixture f;
  set_tasks(2);
  LaunchOptions o = f.options(2, "ok");
  o.injections = {"kill:worker:1@step=3"};
  const LaunchReport r = launch_with_restarts(o, 2);
  INFO(f.out() << f.err());
  CHECK(r.exit_code == 0);
  CHECK(r.restarts == 1);
  REQUIRE(r.attempts.size() == 2);
  CHECK(r.attempts[0].first_failure == "worker:1");
  CHECK(r.attempts[0].exit_code == 128 + SIGKILL);
  CHECK(r.attempts[1].exit_code == 0);
  CHECK(r.attempts[1].first_failure.empty());
  CHECK(r.attempts[0].job_id != r.attempts[1].job_id);
  CHECK(r.job_id == r.attempts[1].job_id);
  CHECK(r.tasks[1].injection.empty());
  CHECK_THAT(f.err(), Contains("dtrain launch: worker:1 was killed by signal 9 (SIGKILL) at ") &&
                          Contains(" s; restarting the job from the newest checkpoint (restart 1 of 2)"));
  CHECK_THAT(f.out(), Contains("args run --config " + f.config + " --set checkpoint.resume=auto"));
  // The logs hold both starts.
  const std::string log = Fixture::read(f.dir + "/out/logs/worker-1.log");
  CHECK_THAT(log, Contains("INJECT=kill@step=3") && Contains("INJECT=none"));
}

TEST_CASE("a job that keeps failing is restarted max_restarts times, then gives up", "[unit]") {
  Fixture f;
  set_tasks(2);
  ::setenv("FAKE_FAIL_TASK", "worker:0", 1);
  ::setenv("FAKE_FAIL_AGAIN", "1", 1);
  const LaunchReport r = launch_with_restarts(f.options(2, "ok"), 2);
  INFO(f.out() << f.err());
  CHECK(r.exit_code == 3);
  CHECK(r.restarts == 2);
  CHECK(r.attempts.size() == 3);
  CHECK_THAT(f.err(), Contains("worker:0 failed with exit code 3 at ") &&
                          Contains("(restart 1 of 2)") && Contains("(restart 2 of 2)") &&
                          Contains("not restarting: no restarts left (--max-restarts 2)"));
}

TEST_CASE("a config error, SIGINT and max_restarts 0 are not restarted", "[unit]") {
  Fixture f;
  set_tasks(2);
  SECTION("exit code 2") {
    ::setenv("FAKE_FAIL_TASK", "worker:1", 1);
    ::setenv("FAKE_FAIL_CODE", "2", 1);
    const LaunchReport r = launch_with_restarts(f.options(2, "ok"), 3);
    INFO(f.out() << f.err());
    CHECK(r.exit_code == 2);
    CHECK(r.restarts == 0);
    CHECK(r.attempts.size() == 1);
    CHECK_THAT(f.err(), Contains("not restarting: worker:1 ended with a usage or config error"));
    CHECK_THAT(f.err(), !Contains("restarting the job"));
  }
  SECTION("SIGINT") {
    std::jthread interrupter([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      ::kill(::getpid(), SIGINT);
    });
    const LaunchReport r = launch_with_restarts(f.options(2, "wait"), 3);
    interrupter.join();
    INFO(f.out() << f.err());
    CHECK(r.exit_code == 130);
    CHECK(r.restarts == 0);
    CHECK_THAT(f.err(), Contains("not restarting: the launcher got SIGINT"));
  }
  SECTION("max_restarts 0") {
    ::setenv("FAKE_FAIL_TASK", "worker:1", 1);
    const LaunchReport r = launch_with_restarts(f.options(2, "ok"), 0);
    INFO(f.out() << f.err());
    CHECK(r.exit_code == 3);
    CHECK(r.restarts == 0);
    CHECK(r.attempts.size() == 1);
    CHECK_THAT(f.err(), !Contains("restart"));
  }
  CHECK_THROWS_AS(launch_with_restarts(f.options(2, "ok"), -1), ConfigError);
}

TEST_CASE("the console shows the chief's lines and the others' warnings, and each log has every line, unprefixed",
          "[unit]") {
  Fixture f;
  set_tasks(3);
  LaunchOptions o = f.options(3, "ok");
  o.all_task_lines = false;
  const LaunchReport r = launch_cluster(o);
  REQUIRE(r.exit_code == 0);
  const std::string out = f.out(), err = f.err();
  INFO(out << err);
  CHECK_THAT(out, Contains("[worker:0] env TF_CONFIG="));
  CHECK_THAT(out, !Contains("[worker:1] ") && !Contains("[worker:2] "));
  CHECK_THAT(err, Contains("dtrain: warning: [worker:1] a warning from worker:1"));
  CHECK_THAT(err, Contains("dtrain: warning: [worker:2] a warning from worker:2"));
  CHECK_THAT(err, !Contains("[worker:1] dtrain: rendezvous"));  // the others' info lines: their logs only
  CHECK_THAT(err, Contains("dtrain: launch: all 3 tasks past the agreement barrier"));
  for (const char* name : {"worker-0", "worker-1", "worker-2"}) {
    const std::string log = Fixture::read(f.dir + "/out/logs/" + name + ".log");
    INFO(name << ":\n" << log);
    CHECK_THAT(log, Contains("env TF_CONFIG="));
    CHECK_THAT(log, Contains("\ndtrain: rendezvous: all 3 tasks joined and agree"));
    CHECK_THAT(log, Contains("\ndtrain: warning: a warning from "));  // its own "[worker:N] " prefix taken off
    CHECK_THAT(log, !Contains("[worker:"));
  }
}

TEST_CASE("a task's diagnostics name it after their tag, and its log-only lines stay out of the console", "[unit]") {
  Fixture f;
  Console console(f.out_fd, f.err_fd, /*plain_stdout=*/false);
  TaskOutput chief("[worker:0] ", f.dir + "/chief.log", console, ConsoleLines::kAll);
  TaskOutput other("[worker:1] ", f.dir + "/other.log", console, ConsoleLines::kImportant);
  chief.line(2, "dtrain: error: [worker:0] it named itself after the tag");
  chief.line(2, "[worker:0] dtrain: error: it named itself first");
  chief.line(2, "[worker:0] dtrain: rendezvous: an info line");
  chief.line(2, "dtrain-log-only: dtrain: worker:0: the last collectives it started (oldest first):");
  chief.line(2, "dtrain-log-only: #7 workers all_reduce 40 bytes: failed");
  other.line(2, "dtrain: warning: did not name itself");
  other.line(2, "dtrain-log-only: #3 workers error: not a console line");
  const std::string err = f.err();
  CHECK(err == "dtrain: error: [worker:0] it named itself after the tag\n"
               "dtrain: error: [worker:0] it named itself first\n"
               "[worker:0] dtrain: rendezvous: an info line\n"
               "dtrain: warning: [worker:1] did not name itself\n");
  CHECK(Fixture::read(f.dir + "/chief.log") ==
        "dtrain: error: it named itself after the tag\ndtrain: error: it named itself first\n"
        "dtrain: rendezvous: an info line\ndtrain: worker:0: the last collectives it started (oldest first):\n"
        "#7 workers all_reduce 40 bytes: failed\n");
  CHECK(Fixture::read(f.dir + "/other.log") ==
        "dtrain: warning: did not name itself\n#3 workers error: not a console line\n");
  CHECK(other.last_error().empty());  // a log-only line is no error line
  CHECK(chief.last_error() == "dtrain: error: it named itself first");
}

TEST_CASE("a task's progress relay lines become the console's one live line, kept out of its log", "[unit]") {
  Fixture f;
  Console console(f.out_fd, f.err_fd, /*plain_stdout=*/false);
  TaskOutput chief("[worker:0] ", f.dir + "/chief.log", console, ConsoleLines::kAll);
  TaskOutput other("[worker:1] ", f.dir + "/other.log", console, ConsoleLines::kImportant);
  chief.line(1, "dtrain-progress: Epoch 1/2 10/100 [==>.......] ETA 5s 1.0ms/step");
  chief.line(1, "dtrain-progress: Epoch 1/2 20/100 [====>.....] ETA 4s 1.0ms/step");
  other.line(2, "dtrain: warning: slow disk");
  other.line(1, "Epoch 1/2: 100 steps");
  chief.line(1, "Epoch 1/2: 100 steps, 0.1s");
  console.end_live();
  const std::string out = f.out(), err = f.err();
  // Each redraw returns to the line's start and clears what is left of it; a line
  // written meanwhile clears the live line first and the live line comes back after
  // it; the owner's next stdout line (its epoch line) ends it.
  CHECK(out == "\r[worker:0] Epoch 1/2 10/100 [==>.......] ETA 5s 1.0ms/step\033[K"
               "\r[worker:0] Epoch 1/2 20/100 [====>.....] ETA 4s 1.0ms/step\033[K"
               "\r\033[K"  // before worker:1's warning (on stderr)
               "[worker:0] Epoch 1/2 20/100 [====>.....] ETA 4s 1.0ms/step"
               "\r\033[K[worker:0] Epoch 1/2: 100 steps, 0.1s\n");
  CHECK(err == "dtrain: warning: [worker:1] slow disk\n");
  CHECK(Fixture::read(f.dir + "/chief.log") == "Epoch 1/2: 100 steps, 0.1s\n");
  CHECK(Fixture::read(f.dir + "/other.log") == "dtrain: warning: slow disk\nEpoch 1/2: 100 steps\n");
}

