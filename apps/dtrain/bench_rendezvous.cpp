// `dtrain bench rendezvous`: the chief's store against N simulated tasks, one
// table row (or JSON object) per N.
//
// This process is the chief: it serves the real StoreServer (one I/O thread) and
// runs chief:0's session. Worker processes (this binary again, `--slice`) hold
// the other tasks, at most 1,000 each (a task holds two connections, each with
// its own Asio io_context: about 8 descriptors, and a process may open 20,000
// here), and one more process holds only the last worker: the one killed
// (SIGKILL) to time the detection. Measured per N: the time from the moment
// every task starts (each process has its tasks' threads ready, then all are
// released at once) to the last task past the barrier, the store's requests per second
// meanwhile, the server thread's CPU per heartbeat round (every task's heartbeat
// once), and the time from the kill until every other task names the lost one.
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>

#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "launch/process.h"
#include "rendezvous/bench_rendezvous.h"
#include "rendezvous/store_server.h"

namespace dtrain::app {
namespace {

using rendezvous::BenchJob;
constexpr int kTasksPerProcess = 1000;

std::vector<int> parse_task_counts(const std::string& text) {
  std::vector<int> counts;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty() || !all_digits(item) || item.size() > 6 || std::stoi(item) < 2)
      throw ConfigError(str("bench rendezvous: --tasks '", printable(text),
                            "': give task counts from 2 to 999999, comma-separated, e.g. 8,64,512,4096"));
    counts.push_back(std::stoi(item));
  }
  if (counts.empty()) throw ConfigError("bench rendezvous: --tasks is empty; e.g. --tasks 8,64,512,4096");
  return counts;
}

// Raises this process's open-file limit to its hard limit; ConfigError when
// `needed` descriptors still do not fit.
void make_room_for(rlim_t needed, const std::string& what) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < needed)
    throw ConfigError(str("bench rendezvous: ", what, " needs about ", needed, " open files but may open ",
                          limit.rlim_cur, "; raise the hard limit (ulimit -Hn) or give fewer --tasks"));
}

// One worker process and what it printed so far.
struct Worker {
  std::unique_ptr<launch::Process> process;
  launch::UniqueFd out, err;
  std::string out_text, err_tail;
  int first = 0, count = 0;
};

// Reads every worker's output until each printed `lines` complete stdout lines
// (or ended), at most until `deadline`. RuntimeError naming a worker that did
// not, with the end of its stderr.
void read_lines(std::vector<Worker*>& workers, size_t lines, launch::Clock::time_point deadline, const char* what) {
  const auto has_lines = [lines](const Worker* w) {
    return static_cast<size_t>(std::count(w->out_text.begin(), w->out_text.end(), '\n')) >= lines;
  };
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, bool>> owners;  // (worker, is stdout)
    for (Worker* w : workers) {
      if (has_lines(w)) continue;
      if (w->out.valid()) fds.push_back({w->out.get(), POLLIN, 0}), owners.push_back({w, true});
      if (w->err.valid()) fds.push_back({w->err.get(), POLLIN, 0}), owners.push_back({w, false});
    }
    bool waiting = std::any_of(workers.begin(), workers.end(), [&](const Worker* w) { return !has_lines(w); });
    if (!waiting) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - launch::Clock::now()).count();
    if (fds.empty() || left <= 0) {
      for (Worker* w : workers)
        if (!has_lines(w))
          throw RuntimeError(str("bench rendezvous: the process of tasks ", w->first, "..", w->first + w->count - 1,
                                 " did not report ", what, " in time; its last words: ", printable(w->err_tail, 600)));
    }
    poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 200)));
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [w, is_out] = owners[i];
      char buffer[65536];
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      // End of file (0), or an error other than "nothing yet": this pipe is done
      // (errno is looked at only when read failed: a stale EAGAIN must not keep
      // a closed pipe in the poll set, where it would spin).
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) (is_out ? w->out : w->err).reset();
      if (n <= 0) continue;
      if (is_out) {
        w->out_text.append(buffer, static_cast<size_t>(n));
      } else {
        w->err_tail.append(buffer, static_cast<size_t>(n));
        if (w->err_tail.size() > 4096) w->err_tail.erase(0, w->err_tail.size() - 4096);
      }
    }
  }
}

// Line `index` (0-based) of what `w` printed.
std::string line_of(const Worker& w, size_t index) {
  std::istringstream in(w.out_text);
  std::string line;
  for (size_t i = 0; i <= index; ++i) std::getline(in, line);
  return line;
}

Worker start_worker(const BenchJob& job, int first, int count) {
  launch::SpawnSpec spec;
  spec.program = "/proc/self/exe";
  spec.argv = {"dtrain", "bench", "rendezvous", "--slice", str(first, ":", count)};
  for (char** e = environ; *e; ++e) spec.env.push_back(*e);
  spec.stdin_pipe = true;
  spec.stdin_text = job.to_line() + "\n";
  Worker w;
  w.process = launch::Process::spawn(spec);
  w.out = w.process->take_stdout();
  w.err = w.process->take_stderr();
  w.first = first;
  w.count = count;
  return w;
}

struct Row {
  int tasks = 0;
  double barrier_s = 0, server_cpu_barrier_s = 0, requests_per_s = 0, cpu_per_round_us = 0, detect_s = 0, detect_median_s = 0;
  int64_t requests = 0;
  int named = 0, survivors = 0, processes = 0;
};

Row run_one(int tasks, const BenchRendezvousOptions& options) {
  BenchJob job;
  job.tasks = tasks;
  job.credentials = {str("bench-rendezvous-", tasks), "bench-" + random_hex(16)};
  job.heartbeat_interval = options.heartbeat_interval;
  job.heartbeat_timeout = options.heartbeat_timeout;
  job.rendezvous_timeout = std::max(120.0, 5.0 * options.heartbeat_timeout);
  auto server = std::make_shared<rendezvous::StoreServer>("127.0.0.1", 0, rendezvous::bench_server_options(job));
  job.port = server->port();
  Row row;
  row.tasks = tasks;

  std::vector<Worker> workers;
  for (int first = 1; first < tasks - 1; first += kTasksPerProcess)
    workers.push_back(start_worker(job, first, std::min(kTasksPerProcess, tasks - 1 - first)));
  Worker victim = start_worker(job, tasks - 1, 1);
  std::vector<Worker*> all;
  for (auto& w : workers) all.push_back(&w);
  all.push_back(&victim);
  row.processes = static_cast<int>(all.size()) + 1;
  rendezvous::TaskSlice chief(job, 0, 1, server);
  const auto deadline = [](double seconds) {
    return launch::Clock::now() + std::chrono::duration_cast<launch::Clock::duration>(std::chrono::duration<double>(seconds));
  };
  // Once every process has its tasks' threads ready ("ready"), all start at once
  // (their stdin closes): the clock times the rendezvous, not process start-up.
  read_lines(all, 1, deadline(60.0), "that its tasks were ready");
  const int64_t started = rendezvous::steady_now_ns();
  const int64_t requests_before = server->requests_served();
  const double cpu_at_start = server->cpu_seconds();
  chief.start();
  for (Worker* w : all) w->process->close_stdin();
  read_lines(all, 2, deadline(job.rendezvous_timeout), "that its tasks passed the barrier");
  chief.wait_until_joined();
  int64_t last = chief.last_joined_ns();
  for (Worker* w : all) last = std::max<int64_t>(last, std::stoll(line_of(*w, 1).substr(7)));  // "joined <ns>"
  row.barrier_s = static_cast<double>(last - started) * 1e-9;
  row.requests = server->requests_served() - requests_before;
  row.requests_per_s = static_cast<double>(row.requests) / row.barrier_s;
  row.server_cpu_barrier_s = server->cpu_seconds() - cpu_at_start;

  // Heartbeat rounds: every task idles at its first step, as between steps.
  const double cpu_before = server->cpu_seconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(options.heartbeat_rounds * job.heartbeat_interval));
  row.cpu_per_round_us = (server->cpu_seconds() - cpu_before) * 1e6 / options.heartbeat_rounds;

  const std::string lost = str("worker:", tasks - 2);
  const int64_t killed_at = rendezvous::steady_now_ns();
  victim.process->kill_and_reap();
  std::vector<int64_t> found = chief.wait_for_failure(lost, job.heartbeat_timeout + 10.0, row.named);
  all.pop_back();  // the victim says nothing more
  read_lines(all, 3, deadline(job.heartbeat_timeout + 15.0), "when its tasks learned of the kill");
  for (Worker* w : all) {
    std::istringstream in(line_of(*w, 2));  // "detected <named> <ns> <ns> ..."
    std::string word;
    int named = 0;
    in >> word >> named;
    row.named += named;
    for (int64_t t; in >> t;) found.push_back(t);
  }
  std::sort(found.begin(), found.end());
  row.survivors = static_cast<int>(found.size());
  row.detect_s = static_cast<double>(found.back() - killed_at) * 1e-9;
  row.detect_median_s = static_cast<double>(found[found.size() / 2] - killed_at) * 1e-9;
  for (Worker* w : all) w->process->wait_until(deadline(30.0));
  return row;
}

std::string row_json(const Row& r) {
  return str("{\"tasks\":", r.tasks, ",\"processes\":", r.processes, ",\"barrier_seconds\":", r.barrier_s,
             ",\"barrier_requests\":", r.requests,
             ",\"server_cpu_seconds_to_barrier\":", r.server_cpu_barrier_s, ",\"requests_per_second\":", r.requests_per_s,
             ",\"server_cpu_us_per_heartbeat_round\":", r.cpu_per_round_us, ",\"detect_seconds\":", r.detect_s,
             ",\"detect_median_seconds\":", r.detect_median_s, ",\"survivors\":", r.survivors,
             ",\"named_by\":", r.named, "}");
}

// `--slice FIRST:COUNT`: a worker process of the benchmark.
int run_slice(const std::string& slice) {
  const size_t colon = slice.find(':');
  const std::string a = slice.substr(0, colon), b = colon == std::string::npos ? "" : slice.substr(colon + 1);
  if (a.empty() || b.empty() || !all_digits(a) || !all_digits(b) || a.size() > 6 || b.size() > 6)
    throw ConfigError(str("bench rendezvous: --slice '", printable(slice), "' is not FIRST:COUNT"));
  std::string line;
  std::getline(std::cin, line);
  const BenchJob job = BenchJob::from_line(line);
  const int first = std::stoi(a), count = std::stoi(b);
  make_room_for(static_cast<rlim_t>(count) * 8 + 64, str(count, " simulated tasks"));
  // Two threads per task: small stacks (a session needs little), not 8 MiB each.
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_setattr_default_np(&attr);
  pthread_attr_destroy(&attr);
  rendezvous::TaskSlice tasks(job, first, count);
  std::printf("ready\n");
  std::fflush(stdout);
  // The benchmark closes this process's stdin when every process is ready.
  while (std::cin.get() != std::char_traits<char>::eof()) {
  }
  tasks.start();
  tasks.wait_until_joined();
  std::printf("joined %lld\n", static_cast<long long>(tasks.last_joined_ns()));

  std::fflush(stdout);
  int named = 0;
  const std::vector<int64_t> found = tasks.wait_for_failure(str("worker:", job.tasks - 2), job.heartbeat_timeout + 10.0, named);
  std::string out = str("detected ", named);
  for (int64_t t : found) out += str(" ", t);
  std::printf("%s\n", out.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int bench_rendezvous_command(const BenchRendezvousOptions& options) {
  // The simulated tasks' own lines ("all N tasks joined") would flood the output.
  log::set_level(log::Level::kWarn);
  if (!options.slice.empty()) return run_slice(options.slice);
  const std::vector<int> counts = parse_task_counts(options.tasks);
  for (int n : counts) make_room_for(static_cast<rlim_t>(n) * 2 + 64, str("the chief's store for ", n, " tasks"));
  if (!options.json) {
    std::printf("# dtrain rendezvous: the chief's store (one I/O thread) in this process; N simulated tasks (a "
                "thread and two connections each) in worker processes of up to %d\n# heartbeat every %g s, timeout "
                "%g s; detect: SIGKILL of the last worker's process to every other task naming it\n",
                kTasksPerProcess, options.heartbeat_interval, options.heartbeat_timeout);
    std::printf("# %6s %9s %11s %10s %11s %14s %10s %10s %8s\n", "tasks", "processes", "barrier(s)", "requests",
                "requests/s", "cpu/round(us)", "detect(s)", "median(s)", "named");
  }
  for (int n : counts) {
    const Row r = run_one(n, options);
    if (options.json)
      std::printf("%s\n", row_json(r).c_str());
    else
      std::printf("  %6d %9d %11.3f %10lld %11.0f %14.0f %10.3f %10.3f %8s\n", r.tasks, r.processes, r.barrier_s,
                  static_cast<long long>(r.requests), r.requests_per_s, r.cpu_per_round_us, r.detect_s,
                  r.detect_median_s, str(r.named, "/", r.survivors).c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace dtrain::app
