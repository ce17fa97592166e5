// Implementation of launcher.h: the setup (cluster, ports, environment, logs,
// a temporary directory for the tasks' summaries) and the watch loop.
//
// launch_with_restarts() runs one Launcher per start of the job, all with one
// SignalPipe, so that a signal that arrives between two starts is not lost.
//
// The loop is one poll() over the signal self-pipe and every task's two pipes, with
// a timeout of at most kTick so exits and deadlines are checked even when nothing is
// written. The stopping sequence is a small state machine: kRunning (no deadline: a
// training takes as long as it takes) -> kGrace (a task failed; the others may still
// exit by themselves) -> kTerminating (SIGTERM sent) -> kKilling (SIGKILL sent).
// Every state after kRunning has a deadline, and the pipes get a short one to reach
// end of file after the last task is reaped, so the launcher always ends.
#include "launch/launcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/host.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "core/trace.h"
#include "launch/signals.h"
#include "launch/task_output.h"

extern char** environ;

namespace dtrain::launch {
namespace fs = std::filesystem;
namespace {

constexpr auto kTick = std::chrono::milliseconds(200);
constexpr double kKillWait = 5.0;   // seconds to wait for a SIGKILLed task to be reaped
constexpr double kPipeDrain = 2.0;  // seconds for the pipes to close after the last exit
// Seconds a worker started again may still run once the chief ended the job (one
// that joined signed off before the chief ended, and is exiting) before it is stopped.
constexpr double kLateJoinerWait = 5.0;
constexpr size_t kReadChunk = 64 * 1024;
const char* const kOwnVariables[] = {"TF_CONFIG", "DTRAIN_JOB_ID", "DTRAIN_JOB_SECRET",
                                     "DTRAIN_LISTEN_FD", "DTRAIN_INJECT", "DTRAIN_PROGRESS_COLUMNS",
                                     "DTRAIN_TASK_LOG"};

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// A directory of its own under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = str(base && *base ? base : "/tmp", "/dtrain-launch-XXXXXX");
    if (!::mkdtemp(pattern.data()))
      throw IoError(
          str("cannot create a temporary directory ", pattern, ": ", std::strerror(errno)));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One task while it runs.
struct Task {
  std::string name;  // "worker:1"
  std::unique_ptr<Process> process;
  UniqueFd pipes[2];  // the task's stdout, stderr
  LineSplitter lines[2];
  std::unique_ptr<TaskOutput> output;
  bool agreed = false;
  bool rejoined = false;  // started again, it said it joined the running job
  TaskReport report;
  SpawnSpec spawn;  // how it was started (a lost worker is started again from it)
};

enum class Phase { kRunning, kGrace, kTerminating, kKilling };

std::vector<std::string> base_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    const bool ours = std::find(std::begin(kOwnVariables), std::end(kOwnVariables), name) !=
                      std::end(kOwnVariables);
    if (!ours) env.push_back(entry);
  }
  return env;
}

int default_threads(const LaunchOptions& options, size_t tasks) {
  if (options.threads > 0) return options.threads;
  if (options.job.threads > 0 || options.omp_num_threads > 0) return 0;  // theirs to choose
  const int cores = usable_cores();
  return std::max(1, cores / static_cast<int>(tasks));
}

// 1.234
std::string seconds_3(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", seconds);
  return text;
}

std::string file_name(const config::TaskId& task) { return str(task.type, "-", task.index); }

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The width of the terminal on `fd`; 0 when it is no terminal (or plain output
// was asked for): then no live progress line.
int terminal_columns(int fd, bool plain) {
  if (plain || ::isatty(fd) != 1) return 0;
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) != 0 || size.ws_col == 0) return 80;
  return size.ws_col;
}

// "2026-11-27T19:30:05.123Z"
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[96];  // (room for any int the fields could hold: GCC checks that)
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms));
  return text;
}

void note(int fd, const std::string& message) {
  write_all(fd, str("dtrain: launch: ", message, "\n"));
}

// One start of the job: `restart` 0 for the first, else the restart it is.
class Launcher {
 public:
  Launcher(const LaunchOptions& options, SignalPipe& signals, int restart)
      : options_(options),
        signals_(signals),
        restart_(restart),
        console_(options.stdout_fd, options.stderr_fd, options.plain_stdout) {}
  LaunchReport run();

 private:
  void note(const std::string& message) { console_.write_line(2, str("dtrain: launch: ", message, "\n")); }
  void watch();
  // Joins the tasks' <output_dir>/trace/*.json (output.trace) into <output_dir>/trace.json.
  void merge_task_traces();
  std::string finished_line() const;
  void read_pipe(Task& t, int stream);
  void on_line(Task& t, int stream, std::string_view line);
  void check_exits();
  // After the launcher was interrupted: a task that ended as it was asked to (exit
  // 130 after SIGINT, 6 after SIGTERM), which is no failure.
  bool stopped_as_asked(const ExitStatus& status) const;
  bool first_failure_lost_peer() const;  // the first failed task ended with exit 4
  void start_again(Task& t);
  void stop_late_joiners();
  bool chief_ended_ok();  // the chief has ended with exit 0 (noted the first time it is seen)
  void on_signal(int signal);
  void stop_all(int signal);
  size_t running() const;

  const LaunchOptions& options_;
  SignalPipe& signals_;
  const int restart_;
  Console console_;  // the launcher's stdout and stderr, with the lead task's live progress line
  std::vector<std::unique_ptr<Task>> tasks_;
  std::string agree_line_;  // what every task logs once the rendezvous agrees
  std::string chief_;       // the chief's name
  config::ClusterSpec cluster_;  // the job's (for a hang report asked through the store)
  std::string secret_;           // the job's secret (ditto)
  size_t agreed_ = 0;
  Clock::time_point start_;
  Phase phase_ = Phase::kRunning;
  Clock::time_point deadline_;
  LaunchReport report_;
  int worker_restarts_ = 0;  // lost workers started again alone so far
  std::optional<Clock::time_point> chief_ended_ok_;  // when the chief was seen to have ended with exit 0
};

size_t Launcher::running() const {
  return static_cast<size_t>(std::count_if(tasks_.begin(), tasks_.end(),
                                           [](const auto& t) { return !t->process->reaped(); }));
}

void Launcher::on_line(Task& t, int stream, std::string_view line) {
  t.output->line(stream + 1, line);
  // (runtime/cluster_run.cpp's warning on the task that joined: "elastic: worker:2 joined the job; ...")
  if (t.report.restarts > 0 && line.find(str("elastic: ", t.name, " joined the job")) != std::string_view::npos)
    t.rejoined = true;
  if (t.agreed || line.find(agree_line_) == std::string_view::npos) return;
  t.agreed = true;
  if (++agreed_ == tasks_.size()) {
    report_.cluster_up_seconds = since(start_);
    note(str("all ", tasks_.size(), " tasks past the agreement barrier in ", seconds_3(report_.cluster_up_seconds),
             " s"));
  }
}

void Launcher::read_pipe(Task& t, int stream) {
  char buffer[kReadChunk];
  // One read per wake-up, so a chatty task cannot starve the others.
  const ssize_t n = ::read(t.pipes[stream].get(), buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  auto emit = [&](std::string_view line) { on_line(t, stream, line); };
  if (n > 0) {
    t.lines[stream].feed(std::string_view(buffer, static_cast<size_t>(n)), emit);
    return;
  }
  t.lines[stream].finish(emit);  // end of file (or a broken pipe): the last partial line
  t.pipes[stream].reset();
}

void Launcher::stop_all(int signal) {
  size_t n = 0;
  for (auto& t : tasks_) {
    if (t->process->reaped()) continue;
    t->process->signal_group(signal);
    t->report.stopped = true;
    ++n;
  }
  if (n > 0)
    note(str("sent ", signal_name(signal), " to the ", n, " task", n == 1 ? "" : "s",
             " still running"));
}

void Launcher::on_signal(int signal) {
  if (signal == SIGCHLD) return;      // check_exits() looks at every task anyway
  if (signal == SIGUSR1) {            // a hang report, the job goes on: the chief asks every task
    if (!options_.hosts.empty()) {    // the chief's process here is ssh: ask through the store
      if (!options_.ask_remote_chief_for_report) return note("got SIGUSR1, but cannot ask the remote chief for a report");
      note(str("got SIGUSR1: asking ", chief_, " for a hang report through the job's store (the job goes on)"));
      std::thread(options_.ask_remote_chief_for_report, cluster_, report_.job_id, secret_).detach();
      return;
    }
    for (auto& t : tasks_)
      if (t->name == chief_ && !t->process->reaped()) {
        note(str("got SIGUSR1: asking ", chief_, " for a hang report (the job goes on)"));
        t->process->signal_group(SIGUSR1);
      }
    return;
  }
  if (report_.interrupted_by != 0) {  // a second one: no more patience
    note(str("got ", signal_name(signal), " again: killing every task"));
    stop_all(SIGKILL);
    phase_ = Phase::kKilling;
    deadline_ = after(kKillWait);
    return;
  }
  report_.interrupted_by = signal;
  note(str("got ", signal_name(signal),
           ": stopping the job (send it again to kill every task at once)"));
  if (phase_ == Phase::kRunning || phase_ == Phase::kGrace) {
    // Ctrl-C goes on to the tasks as Ctrl-C: each stops at a step's end, saves
    // what the job saves and says "interrupted" (exit 130); other signals as
    // SIGTERM, a preemption (exit 6).
    stop_all(signal == SIGINT ? SIGINT : SIGTERM);
    phase_ = Phase::kTerminating;
    deadline_ = after(options_.grace_period);
  }
}

bool Launcher::stopped_as_asked(const ExitStatus& status) const {
  if (report_.interrupted_by == 0 || status.signal != 0) return false;
  return status.code == to_int(report_.interrupted_by == SIGINT ? ExitCode::kInterrupted : ExitCode::kPreempted);
}

void Launcher::check_exits() {
  for (auto& t : tasks_) {
    if (t->process->reaped() || !t->process->poll_exit()) continue;
    t->report.status = t->process->status();
    t->report.exit_seconds = since(start_);
    t->report.ended_utc = utc_now();
    if (t->report.status.ok() || t->report.late) continue;
    if (stopped_as_asked(t->report.status)) continue;  // (an interruption: no task failed)
    if (!report_.first_failure.empty()) {
      // A task that ended with "peer lost" (exit 4) ended because another did:
      // one that fails by itself after it (another exit code, or a signal the
      // launcher did not send) is the cause.
      // (The chief's sockets close before its process has exited, e.g. under
      // AddressSanitizer's exit checks, and its workers may end first.)
      if (first_failure_lost_peer() && !t->report.stopped &&
          t->report.status.code != static_cast<int>(ExitCode::kPeerLost))
        report_.first_failure = t->name;
      continue;
    }
    const config::TaskId& id = t->report.task;
    if (phase_ == Phase::kRunning && !t->report.stopped &&
        (id.is(config::TaskType::kEvaluator) || (options_.workers_expendable && id.is(config::TaskType::kWorker) && t->name != chief_))) {
      t->report.expendable = true;
      const std::string ended =
          str(t->name, " ended with ", t->report.status.str(), " after ", format_seconds(t->report.exit_seconds));
      if (id.is(config::TaskType::kWorker) && worker_restarts_ < options_.worker_restarts && chief_ended_ok()) {
        note(str(ended, "; the chief has ended the job, so it is not started again"));
        continue;
      }
      if (id.is(config::TaskType::kWorker) && worker_restarts_ < options_.worker_restarts) {
        ++worker_restarts_;
        note(str(ended, "; starting it again alone (restart ", worker_restarts_, " of ", options_.worker_restarts,
                 "): it rejoins the running job"));
        start_again(*t);
        continue;
      }
      note(str(ended, "; the job goes on without it"));
      continue;
    }
    report_.first_failure = t->name;
    if (phase_ != Phase::kRunning) continue;
    phase_ = Phase::kGrace;
    deadline_ = after(options_.grace_period);
    if (running() > 0)
      note(str(t->name, " ended with ", t->report.status.str(), " after ",
               format_seconds(t->report.exit_seconds), "; the others have ",
               format_seconds(options_.grace_period), " to stop by themselves"));
  }
}

bool Launcher::first_failure_lost_peer() const {
  for (const auto& t : tasks_)
    if (t->name == report_.first_failure) return t->report.status.code == static_cast<int>(ExitCode::kPeerLost);
  return false;
}

void Launcher::start_again(Task& t) {
  // What the ended process still had in its pipes goes out first (it has exited: end of file comes).
  for (int s = 0; s < 2; ++s) {
    for (int reads = 0; t.pipes[s].valid() && reads < 1024; ++reads) {
      pollfd p{t.pipes[s].get(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) break;
      read_pipe(t, s);
    }
    if (t.pipes[s].valid()) {
      t.lines[s].finish([&](std::string_view line) { on_line(t, s, line); });
      t.pipes[s].reset();
    }
  }
  // The fault was for the first start only.
  std::erase_if(t.spawn.env, [](const std::string& e) { return e.rfind("DTRAIN_INJECT=", 0) == 0; });
  t.process = Process::spawn(t.spawn);
  t.report.pid = t.process->pid();
  t.report.expendable = false;
  t.report.status = {};
  ++t.report.restarts;
  t.pipes[0] = t.process->take_stdout();
  t.pipes[1] = t.process->take_stderr();
}

// A worker started again that has not joined and still runs kLateJoinerWait
// (or --grace-period, if longer) after the chief ended the job with exit 0 can
// never join it (the job's store was the chief's): it is stopped, and its exit is
// no failure. (It would wait for the chief until its rendezvous_timeout.)
bool Launcher::chief_ended_ok() {
  if (!chief_ended_ok_) {
    const auto chief = std::find_if(tasks_.begin(), tasks_.end(), [&](const auto& t) { return t->name == chief_; });
    if (chief == tasks_.end() || !(*chief)->process->reaped() || !(*chief)->report.status.ok()) return false;
    chief_ended_ok_ = Clock::now();
  }
  return true;
}

void Launcher::stop_late_joiners() {
  if (phase_ != Phase::kRunning || worker_restarts_ == 0 || !chief_ended_ok()) return;
  const double wait = std::max(kLateJoinerWait, options_.grace_period);
  if (Clock::now() < *chief_ended_ok_ + std::chrono::duration<double>(wait)) return;
  for (auto& t : tasks_)
    if (!t->process->reaped() && t->report.restarts > 0 && !t->rejoined && !t->report.late) {
      note(str(t->name, " was started again, but the chief ended the job before it joined: stopping it"));
      t->process->signal_group(SIGTERM);
      t->report.stopped = t->report.late = true;
    }
}

void Launcher::watch() {
  bool draining = false;
  Clock::time_point drain_deadline;
  for (;;) {
    check_exits();
    stop_late_joiners();
    const size_t alive = running();
    if (alive == 0 && !draining) {
      draining = true;
      drain_deadline = after(kPipeDrain);
    }
    std::vector<pollfd> fds = {{signals_.fd(), POLLIN, 0}};
    std::vector<std::pair<Task*, int>> owners;
    for (auto& t : tasks_)
      for (int s = 0; s < 2; ++s)
        if (t->pipes[s].valid()) {
          fds.push_back({t->pipes[s].get(), POLLIN, 0});
          owners.push_back({t.get(), s});
        }
    if (alive == 0 && (owners.empty() || Clock::now() >= drain_deadline)) break;
    if (phase_ != Phase::kRunning && Clock::now() >= deadline_ && alive > 0) {
      if (phase_ == Phase::kGrace) {
        stop_all(SIGTERM);
        phase_ = Phase::kTerminating;
        deadline_ = after(options_.grace_period);
      } else if (phase_ == Phase::kTerminating) {
        stop_all(SIGKILL);
        phase_ = Phase::kKilling;
        deadline_ = after(kKillWait);
      } else {
        note(str(alive, " task(s) survived SIGKILL for ", kKillWait, " s; giving up on them"));
        break;  // ~Process still kills and reaps each one
      }
      continue;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(kTick);
    if (phase_ != Phase::kRunning)
      wait = std::clamp(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()) +
              std::chrono::milliseconds(1),
          std::chrono::milliseconds(0), wait);
    if (::poll(fds.data(), fds.size(), static_cast<int>(wait.count())) < 0 && errno != EINTR)
      throw RuntimeError(str("poll: ", std::strerror(errno)));
    if (fds[0].revents != 0)
      for (int s : signals_.take()) on_signal(s);
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) read_pipe(*owners[i - 1].first, owners[i - 1].second);
  }
  for (auto& t : tasks_)  // what a pipe still holds after the drain deadline
    for (int s = 0; s < 2; ++s)
      if (t->pipes[s].valid()) {
        t->lines[s].finish([&](std::string_view line) { on_line(*t, s, line); });
        t->pipes[s].reset();
      }
  for (auto& t : tasks_)
    if (!t->process->reaped()) {
      t->process->kill_and_reap();
      t->report.status = t->process->status();
      t->report.exit_seconds = since(start_);
      t->report.ended_utc = utc_now();
      t->report.stopped = true;
    }
}

LaunchReport Launcher::run() {
  if (!options_.task_args) throw InternalError("launch: no task_args given");
  const bool remote = !options_.hosts.empty();
  ClusterPlan plan = remote ? plan_hostfile_cluster(options_.hosts, options_.port_base, "--hostfile")
                            : plan_cluster(options_.job.file_cluster, options_.cluster,
                                           options_.tf_config ? options_.tf_config->c_str() : nullptr);
  const std::vector<RemoteSlot> slots = remote_slots(options_.hosts);  // plan.tasks' hosts, in order
  const std::vector<Injection> injections = parse_injections(options_.injections, plan.spec);
  chief_ = plan.spec.chief().str();
  cluster_ = plan.spec;
  if (options_.grace_period < 0) throw ConfigError("--grace-period cannot be negative");

  const fs::path log_dir =
      fs::path(options_.job.output_dir.empty() ? "runs/launch" : options_.job.output_dir) / "logs";
  if (!options_.job.output_dir.empty()) {  // no trace of an earlier launch may join this one's
    std::error_code ignored;
    fs::remove_all(fs::path(options_.job.output_dir) / "trace", ignored);
  }
  std::error_code ec;
  fs::create_directories(log_dir, ec);
  if (ec)
    throw IoError(str("cannot create the log directory ", log_dir.string(), ": ", ec.message()));

  const TempDir summaries;
  report_.job_id = "launch-" + random_hex(8);
  agree_line_ = str("rendezvous: all ", plan.tasks.size(), " tasks joined and agree");
  std::vector<std::string> env = base_environment();
  const std::string secret = options_.job_secret.empty() ? random_hex(32) : options_.job_secret;
  secret_ = secret;
  // What every task gets (a remote one in its script; the secret then on stdin).
  std::vector<std::string> task_env = {"DTRAIN_JOB_ID=" + report_.job_id};
  // The tasks share this machine's cores: OpenMP threads that spin while waiting
  // would steal them from the other tasks (measured: up to 10x slower steps).
  if (!std::getenv("OMP_WAIT_POLICY") && plan.tasks.size() > 1) task_env.push_back("OMP_WAIT_POLICY=passive");
  if (!remote) {
    env.push_back("DTRAIN_JOB_SECRET=" + secret);
    env.insert(env.end(), task_env.begin(), task_env.end());
  }
  // Remote hosts have their own cores: each task there takes what its host shares out.
  const int threads = remote ? options_.threads : default_threads(options_, plan.tasks.size());
  RemoteShell shell = options_.remote;
  if (remote) {
    // A local task inherits the launcher's environment; a remote one gets oneDNN's
    // ISA cap too where it is set, so the job's tasks compute on one instruction
    // set wherever they run (as the capped test run expects of a hostfile job).
    for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
      if (const char* value = std::getenv(name)) task_env.push_back(str(name, "=", value));
    shell.ssh = find_program(shell.ssh, "--hostfile: the ssh client");
    if (shell.cwd.empty()) shell.cwd = fs::current_path().string();
  }

  const std::string each = threads == 1 ? ", 1 thread each" : str(", ", threads, " threads each");
  note(str("job ", report_.job_id, ": ", plan.tasks.size(), plan.tasks.size() == 1 ? " task" : " tasks",
           " (cluster from ", plan.source,
           ", chief ", plan.spec.chief().str(), " at ", plan.spec.address(plan.spec.chief()),
           threads > 0 ? each : "", "); logs in ", log_dir.string()));
  // argv[0] as `ps` shows it: the binary's path rather than /proc/self/exe.
  std::string program_name = options_.program;
  if (program_name == "/proc/self/exe") program_name = fs::read_symlink(program_name, ec).string();
  if (program_name.empty()) program_name = "dtrain";
  if (remote && shell.dtrain.empty()) shell.dtrain = program_name;  // the same path on every host

  const int progress_columns = terminal_columns(options_.stdout_fd, options_.plain_stdout);
  start_ = Clock::now();
  for (PlannedTask& p : plan.tasks) {
    auto t = std::make_unique<Task>();
    t->name = p.task.str();
    t->report.task = p.task;
    t->report.address = p.port.address;
    t->report.over_ssh = remote;
    t->report.log_path = (log_dir / (file_name(p.task) + ".log")).string();
    for (const Injection& i : injections)
      if (i.task == p.task) t->report.injection = i.value;
    // The console shows the lead task (the chief) and an evaluator (its own
    // results), the others' warnings and errors, unless every line is asked for
    // (or read by a program: plain_stdout).
    const bool lead = p.task == plan.spec.chief();
    const bool shown_whole = lead || p.task.is(config::TaskType::kEvaluator) || options_.all_task_lines || options_.plain_stdout;
    const ConsoleLines shown = shown_whole ? ConsoleLines::kAll : ConsoleLines::kImportant;
    t->output = std::make_unique<TaskOutput>(str("[", t->name, "] "), t->report.log_path, console_, shown,
                                             /*append=*/restart_ > 0);

    SpawnSpec spec;
    const TaskStart start{p.task, str(summaries.path(), "/", file_name(p.task), ".json"), threads, restart_};
    std::vector<std::string> variables = {"TF_CONFIG=" + tf_config_json(plan.spec, p.task),
                                          // torchrun's name for "the how-manieth task on this machine": a task
                                          // whose device is "auto" or "gpu" takes GPU LOCAL_RANK % (GPUs here).
                                          str("LOCAL_RANK=", remote ? slots[tasks_.size()].local_rank
                                                                    : static_cast<int>(tasks_.size()))};
    if (!t->report.injection.empty()) variables.push_back("DTRAIN_INJECT=" + t->report.injection);
    // Where its lines go: its long detail (a flight record) goes there alone (core/log.h).
    variables.push_back("DTRAIN_TASK_LOG=" + t->report.log_path);
    // On a terminal the lead task's progress bar becomes the console's live line.
    if (lead && progress_columns > 0)
      variables.push_back(str("DTRAIN_PROGRESS_COLUMNS=", progress_columns - static_cast<int>(t->name.size()) - 3));
    // Tasks that serve on their own address get its reserved socket: the chief
    // (the rendezvous store) and ps tasks (parameter_server's variables). A remote
    // task binds its host's port itself.
    const bool serves = !remote && (p.task == plan.spec.chief() || p.task.is(config::TaskType::kPs));
    spec.env = env;
    if (remote) {
      variables.insert(variables.begin(), task_env.begin(), task_env.end());
      spec.program = shell.ssh;
      spec.argv = remote_argv(shell, slots[tasks_.size()].host->target,
                              remote_script(shell, variables, options_.task_args(start)));
      spec.stdin_pipe = true;
      spec.stdin_text = secret + "\n";
    } else {
      spec.program = options_.program;
      spec.argv = {program_name};
      for (std::string& arg : options_.task_args(start)) spec.argv.push_back(std::move(arg));
      spec.env.insert(spec.env.end(), variables.begin(), variables.end());
    }
    if (serves) {
      spec.inherit_fd = p.port.socket.get();
      spec.env.push_back(str("DTRAIN_LISTEN_FD=", spec.inherit_fd));
    }
    t->spawn = spec;
    t->process = Process::spawn(spec);
    t->report.pid = t->process->pid();
    t->pipes[0] = t->process->take_stdout();
    t->pipes[1] = t->process->take_stderr();
    // The chief and ps tasks serve on their sockets now; the others stay reserved here until the end.
    if (serves) p.port.socket.reset();
    tasks_.push_back(std::move(t));
  }

  watch();
  report_.wall_seconds = since(start_);
  merge_task_traces();
  for (const auto& t : tasks_) {
    t->report.summary_json =
        read_whole(str(summaries.path(), "/", file_name(t->report.task), ".json"));
    t->report.last_error = t->output->last_error();
    if (t->report.last_error.empty() && t->report.over_ssh && t->report.status.code == 255)  // ssh's own words
      t->report.last_error = t->output->last_stderr_line();
    report_.tasks.push_back(t->report);
  }
  if (report_.interrupted_by != 0) {
    report_.exit_code = 128 + report_.interrupted_by;
  } else if (!report_.first_failure.empty()) {
    for (const auto& t : tasks_)
      if (t->name == report_.first_failure)
        report_.exit_code =
            t->report.status.signal ? 128 + t->report.status.signal : t->report.status.code;
  }
  console_.end_live();
  if (report_.exit_code != 0)
    write_all(options_.stderr_fd, format_exit_table(report_));
  else
    note(finished_line());
  report_.attempts = {{report_.job_id, report_.first_failure, report_.exit_code,
                       report_.wall_seconds}};
  return report_;
}

// "all 4 tasks finished in 8.92 s", or with tasks the job went on without
// (an elastic job's lost worker, an evaluator): "3 of 4 tasks finished in 8.92 s;
// the job went on without worker:2 (signal 9 (SIGKILL))".
std::string Launcher::finished_line() const {
  std::vector<std::string> without;
  for (const TaskReport& t : report_.tasks)
    if (t.expendable && !t.status.ok()) without.push_back(str(t.task.str(), " (", t.status.str(), ")"));
  if (without.empty()) return str("all ", tasks_.size(), " tasks finished in ", format_seconds(report_.wall_seconds));
  return str(tasks_.size() - without.size(), " of ", tasks_.size(), " tasks finished in ",
             format_seconds(report_.wall_seconds), "; the job went on without ", join(without, ", "));
}

void Launcher::merge_task_traces() {
  if (options_.job.output_dir.empty()) return;
  const fs::path dir = fs::path(options_.job.output_dir) / "trace";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  if (files.empty()) return;
  std::sort(files.begin(), files.end());
  const std::string merged = (fs::path(options_.job.output_dir) / "trace.json").string();
  try {
    trace::merge_traces(files, merged);
    note(str("trace of ", files.size(), " tasks in ", merged));
  } catch (const Error& e) {
    note(str("could not merge the tasks' traces: ", e.what()));
  }
}

const TaskReport* first_failure(const LaunchReport& report) {
  for (const TaskReport& t : report.tasks)
    if (t.task.str() == report.first_failure) return &t;
  return nullptr;
}

// Why a restart cannot help the failed start `report`, "" when it may.
std::string restart_refusal(const LaunchReport& report) {
  if (report.interrupted_by != 0)
    return str("the launcher got ", signal_name(report.interrupted_by));
  const TaskReport* first = first_failure(report);
  if (!first) return "no task failed by itself";  // e.g. the launcher gave up on a task
  if (first->stopped) return str(first->task.str(), " was stopped by the launcher");
  if (first->status.signal == 0 && first->status.code == to_int(ExitCode::kConfig))
    return str(first->task.str(), " ended with a usage or config error (exit code 2)");
  return "";
}

// "worker:1 was killed by signal 9 (SIGKILL) at 12.3 s"
std::string failure_text(const TaskReport& task) {
  char at[32];
  std::snprintf(at, sizeof at, "%.1f", task.exit_seconds);
  return str(task.task.str(), task.status.signal ? " was killed by " : " failed with ",
             task.status.str(), " at ", at, " s");
}

}  // namespace

LaunchReport launch_cluster(const LaunchOptions& options) {
  SignalPipe signals;  // before the first fork: no SIGCHLD or SIGINT may be lost
  return Launcher(options, signals, 0).run();
}

LaunchReport launch_with_restarts(const LaunchOptions& options, int max_restarts) {
  if (max_restarts < 0) throw ConfigError("--max-restarts cannot be negative");
  const Clock::time_point start = Clock::now();
  SignalPipe signals;
  LaunchOptions attempt = options;
  if (options.workers_expendable) attempt.worker_restarts = max_restarts;
  std::vector<AttemptReport> attempts;
  for (int restart = 0;; ++restart) {
    LaunchReport report = Launcher(attempt, signals, restart).run();
    attempts.push_back(report.attempts.back());
    std::string refusal;
    if (report.exit_code != 0) {
      refusal = restart_refusal(report);
      for (int s : signals.take())  // one that came after the tasks ended
        if (s != SIGCHLD && refusal.empty()) refusal = str("the launcher got ", signal_name(s));
      if (refusal.empty() && restart == max_restarts)
        refusal = str("no restarts left (--max-restarts ", max_restarts, ")");
    }
    if (report.exit_code == 0 || !refusal.empty()) {
      if (max_restarts > 0 && !refusal.empty()) note(options.stderr_fd, "not restarting: " + refusal);
      report.restarts = restart;
      report.attempts = std::move(attempts);
      report.wall_seconds = since(start);
      return report;
    }
    write_all(options.stderr_fd,
              str("dtrain launch: ", failure_text(*first_failure(report)),
                  "; restarting the job from the newest checkpoint (restart ", restart + 1,
                  " of ", max_restarts, ")\n"));
    attempt.injections.clear();  // the fault was for the first start only
    attempt.worker_restarts = 0;  // lost workers were started again in the first start only
  }
}

}  // namespace dtrain::launch
