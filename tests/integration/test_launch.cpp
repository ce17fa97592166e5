// `dtrain launch` end to end with the real binary: local clusters of real `dtrain
// run` tasks on the Fashion-MNIST MLP (1024 training samples, so each run takes
// seconds). A clean run (prefixed output, logs, the launch summary), a cluster with a
// chief and a ps task, two launches at once, a fixed-port cluster from the job file,
// an injected kill (the others report the lost peer with exit code 4 in time),
// SIGTERM to the launcher, and the errors found before any task starts (an address
// that is not local, a port in use, a bad --inject). After every launch, no process
// of its job may remain: /proc is searched for its DTRAIN_JOB_ID.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "launch/process.h"
#include "support/free_port.h"

extern char** environ;

namespace dtrain::integration {
namespace {

using Catch::Matchers::Contains;
using launch::Clock;

// The small MLP job as --set options (the shipped config itself stays unchanged).
std::vector<std::string> small_job_args(const TempDir& tmp, int epochs = 1) {
  return {"--config", shipped_config_path("fashion_mnist_mlp.json"),
          "--set",    "data.train.take=1024",
          "--set",    "data.test.take=256",
          "--set",    "train.epochs=" + std::to_string(epochs),
          "--set",    "strategy.type=multi_worker_mirrored",
          "--set",    "output.dir=" + tmp.file("out")};
}

RunSpec within(double seconds) {
  RunSpec spec;
  spec.deadline_seconds = seconds;
  return spec;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The pids of live processes whose environment holds DTRAIN_JOB_ID=`job_id`.
std::vector<int> processes_of_job(const std::string& job_id) {
  std::vector<int> found;
  const std::string needle = "DTRAIN_JOB_ID=" + job_id;
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  while (dirent* e = ::readdir(proc)) {
    const std::string name = e->d_name;
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in("/proc/" + name + "/environ", std::ios::binary);
    std::stringstream env;
    env << in.rdbuf();
    const std::string text = env.str();
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
      const size_t end = at + needle.size();
      if ((at == 0 || text[at - 1] == '\0') && (end == text.size() || text[end] == '\0'))
        found.push_back(std::stoi(name));
    }
  }
  ::closedir(proc);
  return found;
}

void check_no_process_left(const std::string& job_id) {
  INFO("job " << job_id);
  REQUIRE(job_id.rfind("launch-", 0) == 0);
  CHECK(processes_of_job(job_id).empty());
}

// A `dtrain launch` running in the background while the test watches its output.
class Background {
 public:
  explicit Background(const std::vector<std::string>& args) {
    launch::SpawnSpec spec;
    spec.program = DTRAIN_BINARY;
    spec.argv = concat({DTRAIN_BINARY}, args);
    for (char** e = environ; *e; ++e) spec.env.emplace_back(*e);
    result_.command = "dtrain";
    for (const auto& a : args) result_.command += " " + a;
    start_ = Clock::now();
    process_ = launch::Process::spawn(spec);
    fds_[0] = process_->take_stdout();
    fds_[1] = process_->take_stderr();
  }
  pid_t pid() const { return process_->pid(); }
  const RunOutput& output() const { return result_; }

  // Reads output until `done(stdout)` holds; false at the deadline.
  template <class Predicate>
  bool read_until(double seconds, Predicate done) {
    const auto deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (!done(result_.out)) {
      if (Clock::now() >= deadline || !pump(50)) return done(result_.out);
    }
    return true;
  }

  // Reads to the end and reaps; FAILs when that takes longer than `seconds`.
  RunOutput finish(double seconds) {
    const auto deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (pump(50) && Clock::now() < deadline) {
    }
    if (!process_->wait_until(deadline)) {
      process_->kill_and_reap();
      FAIL("dtrain launch did not end within " << seconds << " s\n" << describe(result_));
    }
    result_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    result_.exit_code = process_->status().code;
    result_.signal = process_->status().signal;
    if (result_.signal != 0) FAIL("dtrain launch was killed by a signal\n" << describe(result_));
    return result_;
  }

 private:
  // One poll over both pipes; false once both are closed.
  bool pump(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int i = 0; i < 2; ++i)
      if (fds_[i].valid()) {
        fds.push_back({fds_[i].get(), POLLIN, 0});
        which.push_back(i);
      }
    if (fds.empty()) return false;
    ::poll(fds.data(), fds.size(), timeout_ms);
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      char buffer[65536];
      const ssize_t n = ::read(fds[k].fd, buffer, sizeof buffer);
      if (n > 0)
        (which[k] == 0 ? result_.out : result_.err).append(buffer, static_cast<size_t>(n));
      else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        fds_[which[k]].reset();
    }
    return true;
  }

  std::unique_ptr<launch::Process> process_;
  launch::UniqueFd fds_[2];
  RunOutput result_;
  Clock::time_point start_;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

bool starts_with_any(const std::string& line, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes)
    if (line.rfind(p, 0) == 0) return true;
  return false;
}

using test::free_port;

nlohmann::json job_with_cluster(const TempDir& tmp, const nlohmann::json& cluster) {
  nlohmann::json job = small_mlp_job(1024, 256);
  job["cluster"] = cluster;
  job["strategy"] = {{"type", "multi_worker_mirrored"}};
  job["output"] = {{"dir", tmp.file("out")}};
  return job;
}

}  // namespace

TEST_CASE("launch --workers 2 trains, prefixes every line, logs, and sums up", "[integration]") {
  TempDir tmp;
  const RunOutput r =
      run_dtrain(concat({"launch", "--workers", "2", "--summary", tmp.file("launch.json")},
                        small_job_args(tmp)),
                 within(90));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  for (const std::string& line : lines_of(r.out)) {
    INFO(line);
    CHECK(starts_with_any(line, {"[worker:0] "}));
  }
  for (const std::string& line : lines_of(r.err)) {
    INFO(line);
    CHECK(starts_with_any(line, {"[worker:0] ", "[worker:1] ", "dtrain: launch: "}));
  }
  CHECK_THAT(r.err, Contains("dtrain: launch: all 2 tasks past the agreement barrier in "));
  // The console shows the chief's lines; worker:1's are in its log (below) only.
  CHECK_THAT(r.out, Contains("[worker:0] Done: "));
  CHECK_THAT(r.out, !Contains("[worker:1] "));
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  INFO(s.dump(2));
  CHECK(s["exit_codes"] == nlohmann::json({{"worker:0", 0}, {"worker:1", 0}}));
  for (const auto& [task, log_name] :
       {std::pair{"worker:0", "worker-0.log"}, {"worker:1", "worker-1.log"}}) {
    REQUIRE(s["tasks"][task].is_object());
    CHECK(s["tasks"][task]["test_accuracy"].get<double>() > 0.3);
    // Where a step's time went: its parts add up to the step; the loss sums rode
    // along with the gradients, so no time went to an all-reduce of their own.
    const nlohmann::json& ms = s["tasks"][task]["step_ms_parts"];
    REQUIRE(ms.is_object());
    const double step_ms = s["tasks"][task]["step_ms"].get<double>();
    CHECK(step_ms > 0.0);
    double parts = 0.0;
    for (const char* part : {"data", "compute", "gradient_wait", "update", "metrics", "other"}) {
      CHECK(ms[part].get<double>() >= 0.0);
      parts += ms[part].get<double>();
    }
    CHECK(parts == Approx(step_ms).epsilon(0.01));
    CHECK(ms["compute"].get<double>() > 0.0);
    CHECK(ms["metrics"].get<double>() < 0.01);  // no loss all-reduce of its own (it took ~2 ms a step)
    const std::string log = read_file(tmp.file(std::string("out/logs/") + log_name));
    CHECK_THAT(log, Contains("rendezvous: all 2 tasks joined and agree"));
    CHECK_THAT(log, Contains("Test: loss"));
  }
  CHECK(s["cluster_up_seconds"].get<double>() > 0.0);
  check_no_process_left(s["job_id"]);
}

TEST_CASE("launch --workers 2 with a one_device or mirrored job runs multi_worker_mirrored and says so once",
          "[integration]") {
  for (const std::string strategy : {"", "mirrored"}) {
    CAPTURE(strategy);
    TempDir tmp;
    std::vector<std::string> args = {"launch", "--workers", "2", "--summary", tmp.file("launch.json"),
                                     "--config", shipped_config_path("fashion_mnist_mlp.json"),  // one_device
                                     "--set", "data.train.take=1024", "--set", "data.test.take=256",
                                     "--set", "train.epochs=1", "--set", "output.dir=" + tmp.file("out")};
    if (!strategy.empty()) args.insert(args.end(), {"--set", "strategy.type=" + strategy});
    const RunOutput r = run_dtrain(args, within(90));
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    const std::string said = "dtrain: launch: strategy.type '" + (strategy.empty() ? std::string("one_device") : strategy) +
                             "' trains in one task; the 2 training tasks run multi_worker_mirrored";
    CHECK_THAT(r.err, Contains(said));
    CHECK(r.err.find(said) == r.err.rfind(said));  // one line, not one per task
    const nlohmann::json s = read_json_file(tmp.file("launch.json"));
    for (const char* task : {"worker:0", "worker:1"}) {
      INFO(task);
      CHECK(s["tasks"][task]["strategy"] == "multi_worker_mirrored");
      CHECK(s["tasks"][task]["world_size"] == 2);
    }
    CHECK(s["tasks"]["worker:0"]["params_sha256"] == s["tasks"]["worker:1"]["params_sha256"]);
  }
}

// `command` run by a shell on a pseudo-terminal `columns` wide (util-linux's
// script): what a user's terminal receives.
RunOutput on_terminal(const std::string& command, int columns, double seconds) {
  RunSpec spec;
  spec.deadline_seconds = seconds;
  return run_program("/usr/bin/script",
                     {"-qfec", "stty cols " + std::to_string(columns) + " rows 40; " + command, "/dev/null"}, spec);
}

// The lines of `out` as a terminal ends up showing them: each '\r' returns to the
// start of the line (the later text overwrites), ESC [ K erases the rest of it.
std::vector<std::string> screen_lines(const std::string& out) {
  std::vector<std::string> lines(1);
  size_t column = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    if (c == '\n') {
      lines.emplace_back();
      column = 0;
    } else if (c == '\r') {
      column = 0;
    } else if (c == '\033' && out.compare(i, 3, "\033[K") == 0) {
      lines.back().resize(column);
      i += 2;
    } else {
      if (column < lines.back().size()) lines.back()[column] = c;
      else lines.back().push_back(c);
      ++column;
    }
  }
  return lines;
}

TEST_CASE("on a terminal, launch shows the chief's progress bar as one live line that fits its width",
          "[integration]") {
  for (const int columns : {60, 120}) {
    CAPTURE(columns);
    TempDir tmp;
    std::string command = dtrain_binary() + " launch --workers 2 --threads 1";
    for (const std::string& arg : small_job_args(tmp, 2)) command += " '" + arg + "'";
    command += " --set data.train.take=4096 --set train.batch_size_per_replica=16";  // 128 steps an epoch
    const RunOutput r = on_terminal(command, columns, 120);
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    // Redrawn in place: the bar's frames are separated by '\r', not by new lines.
    CHECK_THAT(r.out, Contains("\r[worker:0] "));
    CHECK_THAT(r.out, Contains("ETA "));
    size_t frames = 0;
    for (size_t at = r.out.find("\r[worker:0] "); at != std::string::npos; at = r.out.find("\r[worker:0] ", at + 1)) {
      const size_t end = r.out.find_first_of("\r\n\033", at + 1);
      const std::string frame = r.out.substr(at + 1, end - at - 1);
      INFO(frame);
      CHECK(static_cast<int>(frame.size()) < columns);  // never wraps onto a new line
      ++frames;
    }
    CHECK(frames >= 2);
    // What stays on the screen: the chief's lines, no bar left over, nothing of worker:1.
    const std::vector<std::string> screen = screen_lines(r.out);
    bool epoch_line = false;
    for (const std::string& line : screen) {
      INFO(line);
      CHECK(line.find("ETA ") == std::string::npos);
      CHECK(line.find("[worker:1]") == std::string::npos);
      epoch_line = epoch_line || line.rfind("[worker:0] Epoch 2/2: 128 steps, ", 0) == 0;
    }
    CHECK(epoch_line);
  }
}

TEST_CASE("launch --resume continues every task from the job's newest checkpoint", "[integration]") {
  TempDir tmp;
  std::vector<std::string> job = concat(small_job_args(tmp, 1), {"--set", "checkpoint.every_epochs=1"});
  const RunOutput first = run_dtrain(concat({"launch", "--workers", "2"}, job), within(90));
  INFO(describe(first));
  REQUIRE(first.exit_code == 0);
  // One more epoch on top: each task resumes, so the job trains the second epoch only.
  const RunOutput second = run_dtrain(
      concat(concat({"launch", "--workers", "2", "--resume", "--summary", tmp.file("launch.json")}, job),
             {"--set", "train.epochs=2"}),
      within(90));
  INFO(describe(second));
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.err, Contains("[worker:0] dtrain: checkpoint: resumed from "));
  CHECK_THAT(second.out, !Contains("Epoch 1/2"));
  CHECK_THAT(second.out, Contains("[worker:0] Epoch 2/2: "));
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  CHECK(s["tasks"]["worker:1"]["params_sha256"] == s["tasks"]["worker:0"]["params_sha256"]);
}

TEST_CASE("launch --workers 3 --chief runs every task to the end", "[integration]") {
  TempDir tmp;
  const RunOutput r = run_dtrain(concat({"launch", "--workers", "3", "--chief",
                                         "--summary", tmp.file("launch.json")},
                                        small_job_args(tmp)),
                                 within(110));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("dtrain: launch: all 4 tasks past the agreement barrier"));
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  CHECK(s["exit_codes"] == nlohmann::json({{"chief:0", 0}, {"worker:0", 0}, {"worker:1", 0}, {"worker:2", 0}}));
  check_no_process_left(s["job_id"]);
}

TEST_CASE("two launches at once do not collide", "[integration]") {
  TempDir a, b;
  Background first(
      concat({"launch", "--workers", "2", "--summary", a.file("launch.json")}, small_job_args(a)));
  Background second(
      concat({"launch", "--workers", "2", "--summary", b.file("launch.json")}, small_job_args(b)));
  const RunOutput ra = first.finish(110);
  const RunOutput rb = second.finish(110);
  INFO(describe(ra) << "\n" << describe(rb));
  REQUIRE(ra.exit_code == 0);
  REQUIRE(rb.exit_code == 0);
  const nlohmann::json sa = read_json_file(a.file("launch.json"));
  const nlohmann::json sb = read_json_file(b.file("launch.json"));
  CHECK(sa["job_id"] != sb["job_id"]);
  std::set<std::string> addresses;
  for (const auto* s : {&sa, &sb})
    for (const auto& [task, result] : (*s)["results"].items())
      addresses.insert(result["address"].get<std::string>());
  CHECK(addresses.size() == 4);
  check_no_process_left(sa["job_id"]);
  check_no_process_left(sb["job_id"]);
}

TEST_CASE("a cluster from the job file runs on its fixed ports", "[integration]") {
  TempDir tmp;
  const std::vector<std::string> workers = {"127.0.0.1:" + std::to_string(free_port()),
                                            "localhost:" + std::to_string(free_port())};
  const std::string job = write_job(tmp, job_with_cluster(tmp, {{"worker", workers}}));
  const RunOutput r =
      run_dtrain({"launch", "--config", job, "--summary", tmp.file("launch.json")}, within(90));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  CHECK(s["results"]["worker:0"]["address"] == workers[0]);
  CHECK(s["results"]["worker:1"]["address"] == workers[1]);
  check_no_process_left(s["job_id"]);
}

TEST_CASE("a task killed mid-run: the others report the lost peer with exit code 4",
          "[integration]") {
  TempDir tmp;
  const RunOutput r =
      run_dtrain(concat({"launch", "--workers", "3", "--inject", "kill:worker:1@step=3",
                         "--grace-period", "20", "--summary", tmp.file("launch.json")},
                        small_job_args(tmp, 3)),
                 within(110));
  INFO(describe(r));
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code == 128 + SIGKILL);  // the first failure: worker:1, by SIGKILL
  // The table names worker:1 as killed by signal 9.
  bool table_row = false;
  for (const std::string& line : lines_of(r.err))
    if (line.rfind("dtrain: launch:   worker:1", 0) == 0)
      table_row = line.find("signal 9") != std::string::npos;
  CHECK(table_row);
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  INFO(s.dump(2));
  CHECK(s["exit_codes"]["worker:1"] == -SIGKILL);
  CHECK(s["first_failure"] == "worker:1");
  // The root cause, first on the console and in the summary: who, when, how, where its log is.
  CHECK(r.err.find("dtrain: launch: root cause: worker:1 (") < r.err.find("how each task ended"));
  CHECK(s["root_cause"]["task"] == "worker:1");
  CHECK(s["root_cause"]["signal"] == SIGKILL);
  CHECK(s["root_cause"]["log"] == s["results"]["worker:1"]["log"]);
  CHECK(s["root_cause"]["ended_utc"].get<std::string>().size() == 24);  // 2026-11-27T19:30:05.123Z
  const double killed_at = s["results"]["worker:1"]["exit_seconds"].get<double>();
  for (const char* task : {"worker:0", "worker:2"}) {
    INFO(task);
    CHECK(s["exit_codes"][task] == 4);
    CHECK(s["results"][task]["stopped_by_launcher"] == false);  // it stopped by itself
    CHECK(s["results"][task]["exit_seconds"].get<double>() - killed_at < 15.0);
    // Its own error line names the lost task and the step.
    bool named = false;
    for (const std::string& line : lines_of(r.err))
      if (line.rfind(std::string("dtrain: error: [") + task + "] ", 0) == 0)
        named =
            line.find("worker:1") != std::string::npos && line.find("step") != std::string::npos;
    CHECK(named);
  }
  // The cause is said once per task, in its error line: no warning before it
  // saying the same, and the chief does not repeat it as "saw it first as".
  CHECK_THAT(r.err, !Contains("the job failed: "));
  CHECK_THAT(r.err, !Contains("saw it first as: task worker:1"));
  check_no_process_left(s["job_id"]);
  for (const auto& [task, result] : s["results"].items())
    CHECK(::kill(result["pid"].get<int>(), 0) != 0);
}

TEST_CASE("SIGTERM to the launcher stops every task, and none outlives it", "[integration]") {
  TempDir tmp;
  Background launch(concat({"launch", "--workers", "2", "--summary", tmp.file("launch.json")},
                           small_job_args(tmp, 500)));
  const bool up = launch.read_until(60, [](const std::string& out) {
    return out.find("[worker:0] Epoch 1/") != std::string::npos;  // (the chief's lines: past the rendezvous)
  });
  INFO(describe(launch.output()));
  REQUIRE(up);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE(::kill(launch.pid(), SIGTERM) == 0);
  const RunOutput r = launch.finish(30);
  INFO(describe(r));
  CHECK(r.exit_code == 128 + SIGTERM);
  CHECK_THAT(r.err, Contains("got SIGTERM"));
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  for (const auto& [task, code] : s["exit_codes"].items()) CHECK(code != 0);
  check_no_process_left(s["job_id"]);
}

TEST_CASE("Ctrl-C to the launcher is an interruption: every task stops at a step's end and says so once", "[integration]") {
  TempDir tmp;
  Background launch(concat({"launch", "--workers", "2", "--summary", tmp.file("launch.json")},
                           small_job_args(tmp, 500)));
  const bool up = launch.read_until(60, [](const std::string& out) {
    return out.find("[worker:0] Epoch 1/") != std::string::npos;
  });
  INFO(describe(launch.output()));
  REQUIRE(up);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE(::kill(launch.pid(), SIGINT) == 0);  // what the terminal sends the launcher for Ctrl-C
  const RunOutput r = launch.finish(30);
  INFO(describe(r));
  CHECK(r.exit_code == 130);
  CHECK_THAT(r.err, Contains("got SIGINT"));
  // The chief's line on the console (a worker's lines other than errors stay in its log).
  CHECK_THAT(r.err, Contains("[worker:0] dtrain: interrupted (Ctrl-C) after step "));
  CHECK_THAT(read_file(tmp.file("out/logs/worker-1.log")), Contains("dtrain: interrupted (Ctrl-C) after step "));
  CHECK_THAT(r.err, Contains("interrupted by SIGINT (exit code 130): the tasks stopped as asked"));
  CHECK_THAT(r.err, !Contains("the job failed") && !Contains("root cause") && !Contains("dtrain: error:"));
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  for (const auto& [task, code] : s["exit_codes"].items()) CHECK(code == 130);
  check_no_process_left(s["job_id"]);
}

TEST_CASE("a cluster address that is not local is a config error", "[integration]") {
  TempDir tmp;
  const std::string job = write_job(
      tmp, job_with_cluster(tmp, {{"worker", {"127.0.0.1:" + std::to_string(free_port()), "192.0.2.7:2222"}}}));
  const RunOutput r = run_dtrain({"launch", "--config", job});
  check_error(r, 2, {"worker:1", "192.0.2.7:2222", "not local"});
}

TEST_CASE("a port in use is a config error naming the address and the task", "[integration]") {
  TempDir tmp;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const std::string taken = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const std::string job =
      write_job(tmp, job_with_cluster(tmp, {{"worker", {"127.0.0.1:" + std::to_string(free_port()), taken}}}));
  const RunOutput r = run_dtrain({"launch", "--config", job});
  ::close(fd);
  check_error(r, 2, {"worker:1", taken, "in use"});
}

TEST_CASE("a bad --inject is a config error", "[integration]") {
  TempDir tmp;
  check_error(run_dtrain(concat({"launch", "--workers", "2", "--inject", "kill:worker:5@step=3"},
                                small_job_args(tmp))),
              2, {"worker:5 is not a task of this cluster", "worker:0, worker:1"});
  check_error(run_dtrain(concat({"launch", "--workers", "2", "--inject", "kill:worker:1"},
                                small_job_args(tmp))),
              2, {"--inject 'kill:worker:1'", "kill:TYPE:INDEX@step=N"});
}

// `dtrain launch` of the small job under parameter_server: chief + 2 workers + 1 ps,
// with `flags` (--inject, --max-restarts), the launch summary in tmp/launch.json.
std::vector<std::string> ps_launch_args(const TempDir& tmp, const std::vector<std::string>& flags, int epochs) {
  return concat(concat(concat({"launch", "--workers", "2", "--ps", "1", "--chief", "--summary", tmp.file("launch.json")},
                              flags),
                       small_job_args(tmp, epochs)),
                {"--set", "strategy.type=parameter_server", "--set", "train.batch_size_per_replica=16"});
}

TEST_CASE("parameter_server: a killed worker does not stop the job, every work unit completes, a killed ps ends it",
          "[integration]") {
  TempDir tmp;
  const RunOutput r = run_dtrain(ps_launch_args(tmp, {"--inject", "kill:worker:1@step=10"}, 2), within(110));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);  // the job's: the chief finished
  CHECK_THAT(r.err, Contains("worker:1 ended with signal 9 (SIGKILL)"));
  CHECK_THAT(r.err, Contains("the job goes on without it"));
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  CHECK(s["exit_codes"]["worker:1"] == -9);
  CHECK(s["exit_codes"]["chief:0"] == 0);
  const nlohmann::json& units = s["tasks"]["chief:0"]["work_units"];
  CHECK(units["total"].get<int>() > 0);
  CHECK(units["completed"] == units["total"]);
  CHECK(units["workers_lost"] == 1);
  CHECK(s["tasks"]["chief:0"]["test_accuracy"].get<double>() > 0.5);

  // With --max-restarts the lost worker alone is started again and rejoins the running job.
  TempDir again_tmp;
  const RunOutput restarted = run_dtrain(
      ps_launch_args(again_tmp, {"--max-restarts", "1", "--inject", "kill:worker:1@step=10"}, 6), within(110));
  INFO(describe(restarted));
  REQUIRE(restarted.exit_code == 0);
  CHECK_THAT(restarted.err, Contains("starting it again alone (restart 1 of 1)"));
  const nlohmann::json a = read_json_file(again_tmp.file("launch.json"));
  CHECK(a["restarts"] == 0);  // the job itself was not started again
  CHECK(a["results"]["worker:1"]["started_again"] == 1);
  for (const char* task : {"chief:0", "worker:0", "worker:1", "ps:0"}) CHECK(a["exit_codes"][task] == 0);
  CHECK_FALSE(a["tasks"]["worker:1"].is_null());  // the second worker:1 joined and finished with the job
  CHECK(a["tasks"]["chief:0"]["work_units"]["completed"] == a["tasks"]["chief:0"]["work_units"]["total"]);
  // Every task's summary says what it is: the workers know the job's 2 workers and
  // hold no final parameters (the coordinator's summary has them); the ps task
  // says what it served.
  CHECK(a["tasks"]["chief:0"]["world_size"] == 2);
  CHECK(a["tasks"]["chief:0"]["params_sha256"].get<std::string>().size() == 64);
  for (const char* worker : {"worker:0", "worker:1"}) {
    INFO(worker);
    CHECK(a["tasks"][worker]["world_size"] == 2);
    CHECK(a["tasks"][worker]["params_sha256"].is_null());
  }
  const nlohmann::json& ps = a["tasks"]["ps:0"];
  REQUIRE(ps.is_object());
  CHECK(ps["role"] == "ps");
  CHECK(ps["world_size"] == 2);
  CHECK(ps["updates_applied"].get<int64_t>() > 0);
  CHECK(ps["variable_floats"] == 235146);  // the MLP's every parameter, on the one ps task
  // The coordinator's memory estimate holds no optimizer slots: they are the ps task's.
  CHECK_THAT(restarted.out, Contains("adam on the ps tasks (its slots are theirs)"));
  CHECK_THAT(restarted.out, Contains("optimizer slots 0 B"));
  CHECK(a["tasks"]["chief:0"]["work_units"]["workers_lost"] == 1);

  TempDir ps_tmp;
  const RunOutput killed = run_dtrain(ps_launch_args(ps_tmp, {"--inject", "kill:ps:0@step=20"}, 50), within(60));
  INFO(describe(killed));
  CHECK(killed.exit_code == 128 + SIGKILL);
  const nlohmann::json k = read_json_file(ps_tmp.file("launch.json"));
  for (const char* task : {"chief:0", "worker:0", "worker:1"}) CHECK(k["exit_codes"][task] == 4);
  CHECK_THAT(killed.out + killed.err, Contains("task ps:0"));
  check_no_process_left(k["job_id"]);
}

TEST_CASE("parameter_server: a killed ps with --max-restarts 1 restarts the job from the ps tasks' checkpoint",
          "[integration]") {
  TempDir tmp;
  // 64 updates per epoch (1024 samples, batch 16, async); a checkpoint every 40; ps:0 dies at update 150.
  const RunOutput r = run_dtrain(concat(ps_launch_args(tmp, {"--max-restarts", "1", "--inject", "kill:ps:0@step=150"}, 4),
                                        {"--set", "checkpoint.every_steps=40"}),
                                 within(120));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("dtrain launch: ps:0 was killed by signal 9 (SIGKILL)") &&
                        Contains("restarting the job from the newest checkpoint (restart 1 of 1)"));
  CHECK_THAT(r.err, Contains("resumed from"));
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  CHECK(s["restarts"] == 1);
  CHECK(s["attempts"][0]["first_failure"] == "ps:0");
  for (const char* task : {"chief:0", "worker:0", "worker:1", "ps:0"}) CHECK(s["exit_codes"][task] == 0);
  const nlohmann::json& chief = s["tasks"]["chief:0"];
  // Updates count from the checkpoint's step; units in flight when it was saved are trained again.
  CHECK(chief["steps"].get<int>() >= 4 * 64);
  // The second start trained only what the checkpoint did not hold: fewer units than the 4 epochs have.
  CHECK(chief["work_units"]["completed"] == chief["work_units"]["total"]);
  CHECK(chief["work_units"]["total"].get<int>() < 4 * 4);
  CHECK(chief["test_accuracy"].get<double>() > 0.5);
}

TEST_CASE("parameter_server: a checkpoint written with 2 ps tasks resumes onto 1 ps", "[integration]") {
  TempDir tmp;
  const std::vector<std::string> ps_job = {"--set", "strategy.type=parameter_server",
                                           "--set", "train.batch_size_per_replica=16",
                                           "--set", "checkpoint.every_epochs=1",
                                           "--set", "strategy.variable_partitioner={\"type\": \"fixed\", \"num_shards\": 2}"};
  const RunOutput first = run_dtrain(
      concat(concat({"launch", "--workers", "2", "--ps", "2", "--chief"}, small_job_args(tmp, 1)), ps_job), within(60));
  INFO(describe(first));
  REQUIRE(first.exit_code == 0);
  // Each ps wrote its own shards, the chief the manifest: one model with Keras names comes back.
  const std::string checkpoints = tmp.file("out") + "/checkpoints";
  const RunOutput inspect = run_dtrain({"ckpt", "inspect", "--json", checkpoints}, within(30));
  INFO(describe(inspect));
  REQUIRE(inspect.exit_code == 0);
  const nlohmann::json written = nlohmann::json::parse(inspect.out);
  CHECK(written["sharded"] == true);
  std::vector<std::string> files;
  for (const auto& [name, digest] : written["files"].items()) files.push_back(name);
  CHECK(files == std::vector<std::string>{"ps-00000-of-00002.safetensors", "ps-00001-of-00002.safetensors"});
  REQUIRE(written["model"].size() == 6);
  CHECK(written["model"][0]["name"] == "dense/kernel");
  CHECK(written["model"][0]["shape"] == nlohmann::json::array({784, 256}));
  CHECK(written["optimizer"].size() == 12);  // Adam's m and v of each variable, whole
  CHECK(written["optimizer"][0]["shape"] == nlohmann::json::array({784, 256}));
  const RunOutput second =
      run_dtrain(concat(concat({"launch", "--workers", "2", "--ps", "1", "--chief", "--summary", tmp.file("launch.json")},
                               small_job_args(tmp, 2)),
                        concat(ps_job, {"--set", "checkpoint.resume=auto"})),
                 within(60));
  INFO(describe(second));
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.out + second.err, Contains("checkpoint: resumed from"));
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  const nlohmann::json& chief = s["tasks"]["chief:0"];
  // Only epoch 2 was trained: the work units of one epoch ("Work: S steps per epoch in U work units ...").
  const std::string out = second.out;
  const size_t at = out.find(" work units of ");
  REQUIRE(at != std::string::npos);
  const size_t begin = out.rfind(' ', at - 1) + 1;
  CHECK(chief["work_units"]["total"].get<int>() == std::stoi(out.substr(begin, at - begin)));
  CHECK(chief["epochs"] == 2);
  CHECK(chief["test_accuracy"].get<double>() > 0.5);
  // The job on one ps wrote the next checkpoint as one shard file.
  const RunOutput after = run_dtrain({"ckpt", "inspect", "--json", checkpoints}, within(30));
  REQUIRE(after.exit_code == 0);
  const nlohmann::json newest = nlohmann::json::parse(after.out);
  CHECK(newest["epoch"] == 2);
  CHECK(newest["files"].contains("ps-00000-of-00001.safetensors"));
  CHECK(newest["files"].size() == 1);
}

}  // namespace dtrain::integration
