// The subcommands behind main.cpp: load the job config (with --set and --threads
// applied) and hand it to the task runtime (lib/runtime) or the trainer.
#include "commands.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include <unistd.h>

#include "job/job_config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/strings.h"
#include "job/reference.h"
#include "kernels/device.h"
#include "launch/launcher.h"
#include "plan/execution_plan.h"
#include "runtime/run.h"
#include "strategy/registry.h"
#include "strategy/strategy_spec.h"
#include "trainer/tasks/generate.h"
#include "trainer/trainer.h"

namespace dtrain::app {
namespace {

// The job with --set and --threads applied; its warnings printed unless `quiet`.
job::JobConfig load_job(const JobOptions& options, std::vector<std::string> extra = {}, bool quiet = false) {
  std::vector<std::string> overrides = options.overrides;
  if (options.threads > 0) overrides.push_back(str("runtime.threads=", options.threads));
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  job::JobConfig job = job::load_job_config(options.config, overrides);
  if (!quiet)
    for (const std::string& w : job.warnings) log::warn(w);
  return job;
}

// The launch summary: {"exit_codes": {task: code, or -signal}, "tasks": {task: its
// run summary or null}, "results": {task: details}, and the job's figures (those of
// the last start; "restarts" and "attempts" list every start).
void write_launch_summary(const launch::LaunchReport& report, const std::string& path) {
  nlohmann::json codes = nlohmann::json::object();
  nlohmann::json tasks = nlohmann::json::object();
  nlohmann::json results = nlohmann::json::object();
  for (const launch::TaskReport& t : report.tasks) {
    const std::string name = t.task.str();
    codes[name] = t.status.signal ? -t.status.signal : t.status.code;
    tasks[name] = nlohmann::json::parse(t.summary_json, nullptr, false);
    if (tasks[name].is_discarded()) tasks[name] = nullptr;  // none written, or cut short
    const nlohmann::json none;
    results[name] = {{"address", t.address},
                     {"pid", t.pid},
                     {"exit_code", t.status.signal ? none : nlohmann::json(t.status.code)},
                     {"signal", t.status.signal ? nlohmann::json(t.status.signal) : none},
                     {"meaning", launch::describe_exit(t)},
                     {"exit_seconds", t.exit_seconds},
                     {"ended_utc", t.ended_utc},
                     {"last_error", t.last_error},
                     {"stopped_by_launcher", t.stopped},
                     {"injection", t.injection},
                     {"started_again", t.restarts},
                     {"log", t.log_path}};
  }
  // The first failure, as the console's "root cause" block says it (null when none).
  nlohmann::json root_cause;
  if (const launch::TaskReport* root = launch::root_cause(report)) {
    root_cause = results[root->task.str()];
    root_cause["task"] = root->task.str();
  }
  nlohmann::json attempts = nlohmann::json::array();
  for (const launch::AttemptReport& a : report.attempts)
    attempts.push_back(
        {{"job_id", a.job_id},
         {"first_failure", a.first_failure.empty() ? nlohmann::json() : nlohmann::json(a.first_failure)},
         {"exit_code", a.exit_code},
         {"wall_seconds", a.wall_seconds}});
  const nlohmann::json j = {
      {"exit_code", report.exit_code},
      {"job_id", report.job_id},
      {"first_failure", report.first_failure.empty() ? nlohmann::json()
                                                      : nlohmann::json(report.first_failure)},
      {"root_cause", root_cause},
      {"cluster_up_seconds", report.cluster_up_seconds < 0
                                 ? nlohmann::json()
                                 : nlohmann::json(report.cluster_up_seconds)},
      {"wall_seconds", report.wall_seconds},
      {"restarts", report.restarts},
      {"attempts", attempts},
      {"exit_codes", codes},
      {"tasks", tasks},
      {"results", results}};
  write_text_file(path, "launch --summary", j.dump(2) + "\n");
}

// Set by the SIGTERM thread (or the handler), read by the training loop: an
// atomic, lock-free and so safe in a handler too.
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);
// The signal that asked: SIGTERM (preemption: exit 6) or SIGINT (Ctrl-C: 130).
std::atomic<int> g_stop_signal{0};

void on_sigterm(int) {
  g_stop_signal = SIGTERM;
  g_stop_requested = true;
}

// Set at the training loop's first look at the stop request: from then on a
// SIGTERM stops the job at a step boundary (exit 6); before it, at once (143).
std::atomic<bool> g_stop_watched{false};

// SIGTERM before the training loop watches for it (the rendezvous, loading the
// data): no step to finish and nothing to save, so the task ends now instead of
// waiting out a deadline (Slurm and Kubernetes follow SIGTERM with SIGKILL).
[[noreturn]] void stop_before_training(int signal) {
  std::fflush(stdout);
  const std::string message =
      signal == SIGINT
          ? log::line("", "interrupted (Ctrl-C) before the first step: nothing to finish or save\n")
          : log::line("error: ", "stopped by SIGTERM before the first step (nothing to finish or save)\n");
  (void)!write(STDERR_FILENO, message.data(), message.size());
  _exit(signal == SIGINT ? 130 : 143);
}

// A second Ctrl-C while the step finishes and the checkpoint is written: at once.
[[noreturn]] void interrupted_again() {
  std::fflush(stdout);
  const std::string message = log::line("", "interrupted again (Ctrl-C): stopped at once, nothing saved\n");
  (void)!write(STDERR_FILENO, message.data(), message.size());
  _exit(130);
}

}  // namespace

// SIGTERM is taken by a thread of its own (sigwait) and blocked in this thread
// and every thread it starts, so no compute thread is interrupted by it:
// oneDNN 2.6's AVX2 kernels did not survive a signal frame landing mid-kernel
// (a SIGTERM during a step corrupted the heap about one time in five with the
// ISA capped at AVX2; test_checkpoint_resume found it). The handler stays for a
// thread started before this call, should the signal go there.
std::function<int()> stop_on_sigterm() {
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  // Ctrl-C is a stop at the next step's end too (with the checkpoint the job
  // saves), said as an interruption (exit 130); a second one stops at once.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigaddset(&term, SIGINT);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);
  std::thread([term] {
    int signal = 0;
    while (sigwait(&term, &signal) == 0) {
      if (signal != SIGTERM && signal != SIGINT) continue;
      if (signal == SIGINT && g_stop_signal.load() == SIGINT) interrupted_again();
      g_stop_signal = signal;
      g_stop_requested = true;
      if (!g_stop_watched.load()) stop_before_training(signal);
    }
  }).detach();
  return [] {
    g_stop_watched = true;
    return g_stop_requested.load() ? g_stop_signal.load() : 0;
  };
}

void parse_workers(const std::string& text, LaunchOptions& options) {
  const size_t colon = text.find(':');
  const auto whole = [&](const std::string& part) {
    size_t used = 0;
    int value = -1;
    try {
      value = std::stoi(part, &used);
    } catch (const std::exception&) {
    }
    if (part.empty() || used != part.size() || value < 1)
      throw ConfigError(str("expected a whole number >= 1, or M:N (elastic), got '", text, "'"));
    return value;
  };
  options.workers = whole(colon == std::string::npos ? text : text.substr(colon + 1));
  options.min_workers = colon == std::string::npos ? 0 : whole(text.substr(0, colon));
  if (options.min_workers > options.workers)
    throw ConfigError(str("in '", text, "' the minimum ", options.min_workers, " is above the ", options.workers,
                          " workers to start"));
}

// How many training tasks (chief and workers) `launch` starts from --workers,
// --chief or a hostfile's `hosts`; 0 when the cluster comes from the job file or TF_CONFIG.
int training_tasks_requested(const LaunchOptions& options, const std::vector<launch::HostSlots>& hosts) {
  int slots = 0;
  for (const launch::HostSlots& h : hosts) slots += h.slots;
  return hosts.empty() ? options.workers + (options.chief ? 1 : 0) : slots;
}

// `launch --workers 2` with a job that trains in one task (one_device, or
// mirrored's replicas in one process) means data parallelism across the tasks:
// the tasks run multi_worker_mirrored, and the launcher says so in one line.
// Returns the override to add ("" when none).
std::string strategy_for_launch(const job::JobConfig& job, const LaunchOptions& options,
                                const std::vector<launch::HostSlots>& hosts) {
  const strategy::StrategyEntry& entry = strategy::entry_of(job.strategy);
  const int tasks = training_tasks_requested(options, hosts);
  if (tasks < 2 || options.ps > 0 || entry.across_tasks.empty()) return "";
  std::fprintf(stderr,
               "dtrain: launch: strategy.type '%s' trains in one task; the %d training tasks run "
               "%s (synchronous all-reduce) instead: --set strategy.type=... to choose\n",
               entry.name.c_str(), tasks, entry.across_tasks.c_str());
  return "strategy.type=" + entry.across_tasks;
}

// The arguments `dtrain launch` gives each task: `run` with the launch's own job
// options; a restarted job (or `launch --resume`) resumes from its newest good checkpoint.
std::vector<std::string> run_task_args(const JobOptions& job, bool resume, const launch::TaskStart& start) {
  std::vector<std::string> args = {"run", "--config", job.config};
  for (const std::string& o : job.overrides) args.insert(args.end(), {"--set", o});
  if (resume || start.restart > 0) args.push_back("--resume");
  args.insert(args.end(), {"--summary", start.summary_path});
  if (start.threads > 0) args.insert(args.end(), {"--threads", std::to_string(start.threads)});
  return args;
}

int launch_command(const LaunchOptions& options, const runtime::Environment& env) {
  // (quiet: each task prints the job's warnings)
  JobOptions task_job = options.job;
  if (options.overwrite) task_job.overrides.push_back("output.overwrite=true");
  job::JobConfig job = load_job(task_job, {}, /*quiet=*/true);
  const std::vector<launch::HostSlots> hosts =
      options.hostfile.empty() ? std::vector<launch::HostSlots>{} : launch::read_hostfile(options.hostfile);
  const std::string strategy_override = strategy_for_launch(job, options, hosts);
  if (!strategy_override.empty()) task_job.overrides.push_back(strategy_override);
  if (options.min_workers > 0) {  // --workers M:N: elastic from M to N training tasks
    const strategy::StrategyEntry& entry = strategy::entry_of(job.strategy);
    const strategy::StrategyEntry& runs =
        strategy_override.empty() ? entry : strategy::find_strategy(entry.across_tasks);
    if (!runs.elastic)
      throw ConfigError(str("--workers ", options.workers_text, ": M:N makes the job elastic, and only "
                            "multi_worker_mirrored is; this job's strategy.type is '", runs.name, "'",
                            training_tasks_requested(options, hosts) < 2 && !runs.across_tasks.empty()
                                ? " (one training task trains alone): start 2 or more, e.g. --workers 1:2"
                                : ": --set strategy.type=\"multi_worker_mirrored\""));
    task_job.overrides.push_back(str("strategy.elastic.min_workers=", options.min_workers));
    task_job.overrides.push_back(str("strategy.elastic.max_workers=", options.workers + (options.chief ? 1 : 0)));
  }
  if (task_job.overrides.size() != options.job.overrides.size()) job = load_job(task_job, {}, /*quiet=*/true);
  if (!options.resume) trainer::check_fresh_output(job);  // (said once, before any task starts or log is opened)
  if (job.strategy.elastic.on && options.workers > 0)  // refused here once, not by every task
    strategy::check_elastic_batch(job.strategy.elastic, job.train.gradient_accumulation_steps,
                                  job.train.batch_size_per_replica,
                                  training_tasks_requested(options, hosts), job.source);
  launch::LaunchOptions launch;
  launch.job = {job.file_cluster(), job.output.dir, job.runtime.threads};
  launch.tf_config = env.tf_config;
  launch.job_secret = env.job_secret;
  launch.omp_num_threads = env.host.omp_num_threads;
  launch.threads = options.job.threads;
  launch.task_args = [task_job, resume = options.resume](const launch::TaskStart& start) {
    return run_task_args(task_job, resume, start);
  };
  launch.cluster = {options.workers, options.ps, options.chief, options.evaluator};
  launch.injections = options.injections;
  launch.workers_expendable = job.survives_lost_workers();
  launch.grace_period = options.grace_period;
  launch.all_task_lines = options.console == "all";
  if (!options.hostfile.empty()) {
    if (launch.cluster.any())
      throw ConfigError("--hostfile gives the cluster (every slot a worker); drop --workers, --ps, --chief and --evaluator");
    if (!job.cluster.empty())
      throw ConfigError(str(options.job.config, ": cluster: --hostfile gives the cluster; remove \"cluster\" from the job file"));
    launch.hosts = hosts;
    launch.port_base = options.port_base;
    launch.ask_remote_chief_for_report = runtime::ask_chief_for_report;
    launch.remote.dtrain = options.remote_dtrain;
    launch.remote.grace = options.grace_period;
    if (options.ssh_port > 0) launch.remote.options = {"-p", std::to_string(options.ssh_port)};
    if (!options.ssh_identity.empty()) {
      launch.remote.options.push_back("-i");
      launch.remote.options.push_back(options.ssh_identity);
    }
    for (const std::string& o : options.ssh_options) {
      launch.remote.options.push_back("-o");
      launch.remote.options.push_back(o);
    }
  }
  // The summary's path is checked before the job runs, not after.
  if (!options.summary.empty()) prepare_output_file(options.summary, "launch --summary");
  const launch::LaunchReport report = launch::launch_with_restarts(launch, options.max_restarts);
  if (!options.summary.empty()) write_launch_summary(report, options.summary);
  return report.exit_code;
}

int run_command(const RunOptions& options, const runtime::Environment& env) {
  std::vector<std::string> flags;
  if (options.resume) flags.push_back("checkpoint.resume=auto");
  if (options.overwrite) flags.push_back("output.overwrite=true");
  const job::JobConfig job = load_job(options.job, flags);
  runtime::RunRequest request;
  if (!options.summary.empty()) prepare_output_file(options.summary, "--summary");  // before the run, not after
  request.summary_path = options.summary;
  request.task_flag = options.task;
  request.stop_signal = stop_on_sigterm();
  try {
    runtime::run_job(job, env, request);
  } catch (const Preempted& e) {
    if (e.exit_code() != ExitCode::kInterrupted) throw;  // (SIGTERM: main's error line, exit 6)
    // Asked for: one line, no error ("interrupted (Ctrl-C) after step N; checkpoint ... saved").
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", log::line("", e.what()).c_str());
    return to_int(ExitCode::kInterrupted);
  }
  return 0;
}

int generate_command(const GenerateCommandOptions& options) {
  const job::JobConfig job = load_job(options.job);
  // One position at a time is a few small matmuls: one thread, unless asked
  // (more threads mostly wait for each other, and spin on a busy machine).
  kernels::set_num_threads(options.job.threads > 0 ? options.job.threads : 1);
  trainer::GenerateOptions o;
  o.checkpoint = options.checkpoint;
  o.prompt = options.prompt;
  o.max_tokens = options.max_tokens;
  o.temperature = options.temperature;
  o.top_k = options.top_k;
  o.seed = options.seed;
  const trainer::Generated g = trainer::generate_text(job, o);
  std::fprintf(stderr, "generate: %s (step %lld), %lld tokens at %.0f tokens/s\n", g.checkpoint.c_str(),
               static_cast<long long>(g.step), options.max_tokens, g.tokens_per_second);
  std::fwrite(options.prompt.data(), 1, options.prompt.size(), stdout);
  std::fwrite(g.text.data(), 1, g.text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

int validate_command(const ValidateOptions& options, const runtime::Environment& env) {
  const job::JobConfig job = load_job(options.job);
  runtime::validate_task(job, env, options.task, options.json);
  if (!options.json) std::printf("%s is valid\n", options.job.config.c_str());
  return 0;
}

int cluster_command(const ClusterOptions& options, const runtime::Environment& env) {
  config::FileCluster file{"", {}, {}};  // (no job file: "" for its name)
  config::RuntimeSpec runtime;
  if (!options.config.empty()) {
    const job::JobConfig job = job::load_job_config(options.config, options.overrides);
    file = job.file_cluster();
    runtime = job.runtime;
  }
  const config::ClusterConfig cluster = env.resolve_cluster(file, runtime, options.task);
  if (options.json) {
    std::printf("%s\n", config::cluster_config_json(cluster).c_str());
    return 0;
  }
  if (cluster.single_process()) {
    std::printf("source: local (no cluster: one process alone; runtime.cluster_resolver %s)\n",
                runtime.cluster_resolver.c_str());
    return 0;
  }
  std::printf("source: %s%s\n", cluster.source.c_str(),
              cluster.job_id.empty() ? "" : str(" (job id ", cluster.job_id, ")").c_str());
  const std::string& mine = cluster.spec.address(cluster.task);
  std::printf("task: %s at %s%s\n", cluster.task.str().c_str(), mine.empty() ? "(registers at start)" : mine.c_str(),
              cluster.local_rank ? str(" (local rank ", *cluster.local_rank, ")").c_str() : "");
  std::printf("cluster: %d tasks, world size %d\n", static_cast<int>(cluster.spec.all_tasks().size()),
              cluster.spec.world_size());
  for (const config::TaskId& t : cluster.spec.all_tasks()) {
    const std::string& address = cluster.spec.address(t);
    std::printf("  %-12s %s\n", t.str().c_str(), address.empty() ? "(registers its address at start)" : address.c_str());
  }
  return 0;
}

namespace {

// The per-layer table of `bench train --profile`: milliseconds per step and
// share; the layers inside a Residual block are indented under it.
void print_profile(const trainer::BenchResult& r) {
  double layers_ms = 0.0;  // the model's own layers; a block's time includes its layers'
  for (const auto& l : r.profile)
    if (l.depth == 0) layers_ms += l.forward_ms + l.backward_ms;
  const double step = std::max(r.profile_step_ms, 1e-9);
  std::printf("\nProfile (ms per step, the device waited for around each layer):\n");
  std::printf("%-32s %-24s %10s %10s %7s\n", "layer", "type", "forward", "backward", "share");
  for (const auto& l : r.profile) {
    const std::string name = std::string(2 * static_cast<size_t>(l.depth), ' ') + l.name;
    std::printf("%-32s %-24s %10.3f %10.3f %6.1f%%\n", name.c_str(), l.type.c_str(), l.forward_ms, l.backward_ms,
                100.0 * (l.forward_ms + l.backward_ms) / step);
  }
  std::printf("%-32s %-24s %21.3f %6.1f%%\n", "(loss, update, data, other)", "",
              std::max(0.0, step - layers_ms), 100.0 * std::max(0.0, step - layers_ms) / step);
  std::printf("%-32s %-24s %21.3f\n", "step", "", step);
}

}  // namespace

int bench_train_command(const BenchTrainOptions& options, const runtime::Environment& env) {
  std::vector<std::string> extra;
  if (options.batch > 0) extra.push_back(str("train.batch_size_per_replica=", options.batch));
  const job::JobConfig job = load_job(options.job, extra);
  trainer::BenchOptions bench;
  bench.steps = options.steps;
  bench.warmup_steps = options.warmup;
  bench.profile_steps = options.profile;
  // One process, whatever cluster the job names (bench train times this task's steps).
  const plan::ExecutionPlan plan = plan::make_execution_plan(job, config::ClusterConfig{}, plan::read_machine(env.host, job.device != "cpu"));
  const trainer::BenchResult r = trainer::bench_train(job, plan, bench);
  if (options.json) {
    nlohmann::json j = {{"config", options.job.config}, {"batch_size_per_replica", r.batch_size},
                        {"threads", r.threads},         {"steps", r.steps}, {"device", r.device},
                        {"seconds", r.seconds},         {"samples_per_sec", r.samples_per_sec},
                        {"precision", r.precision}};
    if (!r.cpu_bf16.empty()) j["cpu_bf16"] = r.cpu_bf16;
    if (r.utilization) j.update(nlohmann::json::parse(trainer::utilization_json(*r.utilization)));
    if (!r.profile.empty()) {
      nlohmann::json layers = nlohmann::json::array();
      for (const auto& l : r.profile)
        layers.push_back({{"layer", l.name},
                          {"type", l.type},
                          {"depth", l.depth},
                          {"forward_ms", l.forward_ms},
                          {"backward_ms", l.backward_ms}});
      j["profile"] = {{"step_ms", r.profile_step_ms}, {"layers", layers}};
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  const std::string precision = r.cpu_bf16.empty() ? r.precision : str(r.precision, " (bfloat16 ", r.cpu_bf16, ")");
  std::printf("%s: %s, %s, batch %lld, %d threads, %lld steps in %.3fs: %.1f samples/s\n",
              options.job.config.c_str(), r.device.c_str(), precision.c_str(), static_cast<long long>(r.batch_size),
              r.threads, static_cast<long long>(r.steps), r.seconds, r.samples_per_sec);
  if (r.utilization)
    std::printf("%.0f tokens/s, %s; peak memory %s (%s)\n", r.utilization->tokens_per_sec,
                trainer::utilization_text(*r.utilization).c_str(),
                format_bytes(static_cast<double>(r.utilization->peak_memory_bytes)).c_str(),
                r.utilization->peak_memory_kind.c_str());
  if (!r.profile.empty()) print_profile(r);
  return 0;
}

int devices_command(bool json) {
  std::printf("%s", runtime::devices_report(json).c_str());
  return 0;
}

int reference_command() {
  std::printf("%s", job::reference_markdown().c_str());
  return 0;
}

int version_command() {
  std::printf("dtrain %s\nbackends: %s\ncollectives: %s\n", DTRAIN_VERSION, runtime::backends_description().c_str(),
              runtime::collectives_description().c_str());
  return 0;
}

}  // namespace dtrain::app
