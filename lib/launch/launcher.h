// `dtrain launch`: run every task of a cluster as a local process and watch them.
//
// launch_cluster() plans the cluster on reserved loopback ports (cluster_plan.h),
// starts one process per task (process.h; the caller says with which arguments:
// `dtrain run ...` for `dtrain launch`) with TF_CONFIG,
// a shared DTRAIN_JOB_SECRET and DTRAIN_JOB_ID, the chief's listening socket as
// DTRAIN_LISTEN_FD, and any injected fault as DTRAIN_INJECT; then it relays the
// tasks' output line by line with a "[worker:1] " prefix (task_output.h: the
// chief's lines, the others' warnings and errors, every line to each task's log;
// on a terminal the chief's progress bar is one live line), reports
// when every task has passed the rendezvous agreement, and waits. When a task fails
// it gives the others a grace period to notice the lost peer and exit by themselves,
// then sends SIGTERM to every remaining process group and SIGKILL one grace period
// later; SIGINT, SIGTERM or SIGHUP to the launcher stop the tasks the same way at
// once (a second one kills them). It returns only after every task has been reaped.
//
// With --hostfile the tasks run on other hosts: each is a local `ssh` process whose
// output is relayed the same way, that hands the job secret over on its standard
// input, and whose end (SIGTERM to it, or the launcher's death) stops the remote
// task (remote_task.h).
//
// launch_with_restarts() wraps that in a loop: when a task fails by itself (not a
// config error, not a launcher that was told to stop), the whole job is started again
// on fresh ports, with TaskStart::restart > 0 so the caller's arguments resume from
// the newest good checkpoint, up to --max-restarts times.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "launch/cluster_plan.h"
#include "launch/hostfile.h"
#include "launch/remote_task.h"
#include "launch/process.h"

namespace dtrain::launch {

// What the launcher needs of the job file; the caller reads the file.
struct LaunchJob {
  config::FileCluster file_cluster;  // the file's `cluster` and `task` keys, and its name
  std::string output_dir;            // logs go to <output_dir>/logs ("" = runs/launch/logs)
  int64_t threads = 0;               // runtime.threads (0 = not set)
};

// One task being started: what its arguments may depend on.
struct TaskStart {
  config::TaskId task;
  std::string summary_path;  // a file the task may write its summary JSON to (read back into the report)
  int threads = 0;           // threads to give it (0 = leave it to the task)
  int restart = 0;           // 0 for the first start of the job, then 1, 2, ...: resume
};

struct LaunchOptions {
  LaunchJob job;
  // The launcher's environment, as dtrain read it (runtime/environment.h).
  std::optional<std::string> tf_config;  // its TF_CONFIG: a cluster to launch when there is no other
  std::string job_secret;                // DTRAIN_JOB_SECRET to hand on ("" = generate one)
  int omp_num_threads = 0;               // OMP_NUM_THREADS (0 = unset)

  int threads = 0;                      // --threads for every task (0: see below)
  ClusterRequest cluster;               // --workers/--ps/--chief/--evaluator
  std::vector<std::string> injections;  // --inject kill:worker:1@step=20
  double grace_period = 5.0;            // seconds, for each of the two stopping stages
  // The job survives the loss of its workers (parameter_server: every worker but
  // the chief). An evaluator's loss never stops the job. Such a task's failure is
  // reported and the others go on; the job's exit code is then the others'.
  bool workers_expendable = false;
  // With workers_expendable: how many times a lost worker is started again alone
  // (it rejoins the running job); launch_with_restarts sets it to --max-restarts.
  int worker_restarts = 0;
  // What each task runs: `program` with the arguments task_args gives for it.
  // Tests use a stand-in program; `dtrain launch` passes `run --config ...`,
  // `dtrain bench allreduce` its own command.
  std::string program = "/proc/self/exe";
  std::function<std::vector<std::string>(const TaskStart&)> task_args;
  // --hostfile: the tasks run on these hosts' slots over ssh (hostfile.h,
  // remote_task.h) instead of as local processes; the cluster is theirs.
  std::vector<HostSlots> hosts;
  RemoteShell remote;         // how to reach them (remote.dtrain "": this binary's path)
  // --hostfile: how SIGUSR1 asks the chief for a hang report, since its process
  // here is ssh (which a signal would end): through the job's store, with the
  // job's cluster, id and secret. The app sets it (this library does not link the
  // rendezvous); it runs on a thread of its own and reports its own failure.
  std::function<void(const config::ClusterSpec& cluster, const std::string& job_id, const std::string& secret)>
      ask_remote_chief_for_report;
  int port_base = 8888;       // --port-base: a host's k-th slot listens on port_base + k
  int stdout_fd = 1;  // where the tasks' prefixed stdout lines and the launcher's results go
  int stderr_fd = 2;  // where their stderr lines and the launcher's messages go
  // The tasks' stdout lines go out as they are, without the "[worker:0] " prefix,
  // and the launcher says nothing on stdout (`dtrain bench ... --json`: JSON lines).
  bool plain_stdout = false;
  // --console all: every line of every task on the console. By default it shows the
  // lead task's (the chief's) lines and the others' warnings and errors; each
  // task's log file has all of its lines either way.
  bool all_task_lines = false;
};
// Threads: with no --threads, no runtime.threads and no OMP_NUM_THREADS, each task
// gets threads = max(1, cores / tasks), so that N tasks do not fight over the cores.

struct TaskReport {
  config::TaskId task;
  std::string address;
  int pid = -1;
  ExitStatus status;
  double exit_seconds = 0.0;  // when it ended, from the start of spawning
  bool stopped = false;       // the launcher signalled it (another task failed, or on SIGINT)
  bool expendable = false;    // its failure did not stop the job (an evaluator; a parameter_server worker)
  int restarts = 0;           // times it alone was started again after it was lost (worker_restarts)
  bool late = false;          // started again, but the chief ended the job before it joined: stopped, no failure
  std::string injection;      // its DTRAIN_INJECT, "" for none
  std::string summary_json;   // the --summary file it wrote, "" when none
  std::string log_path;       // <output.dir>/logs/<type>-<index>.log
  bool over_ssh = false;      // started on another host through ssh (--hostfile)
  std::string last_error;     // its last "error:" line on stderr (ssh's exit 255: its last stderr line)
  std::string ended_utc;      // when it ended, "2026-11-27T19:30:05.123Z" ("" while it runs)
};

// One start of the whole job; launch_with_restarts() may start it several times.
struct AttemptReport {
  std::string job_id;         // that start's DTRAIN_JOB_ID
  std::string first_failure;  // "worker:1", "" when no task failed
  int exit_code = 0;
  double wall_seconds = 0.0;
};

struct LaunchReport {
  int exit_code = 0;               // 0, else the first failure's code (128 + signal for a signal)
  std::string job_id;              // DTRAIN_JOB_ID of the tasks
  std::string first_failure;       // "worker:1", "" when no task failed
  int interrupted_by = 0;          // SIGINT/SIGTERM/SIGHUP that stopped the launcher, else 0
  double cluster_up_seconds = -1;  // until every task passed the agreement (-1: never)
  double wall_seconds = 0.0;
  std::vector<TaskReport> tasks;  // in the cluster's order (chief, workers, ps, evaluator)
  // Everything above is the last start's, but wall_seconds, which covers every start.
  int restarts = 0;                     // how many times the job was started again
  std::vector<AttemptReport> attempts;  // every start of the job, the last one last
};

// Runs the job's cluster to the end. Throws ConfigError/IoError for problems found
// before any task starts (bad job file, no cluster, non-local address, port in use,
// bad --inject); task failures are in the report, and the table of exit codes has
// been printed to options.stderr_fd.
LaunchReport launch_cluster(const LaunchOptions& options);

// launch_cluster(), then, while the job failed and a restart may help, up to
// `max_restarts` more starts of the whole job (TaskStart::restart counts them) with
// no --inject faults (they belong to the first start). A restart
// may help unless the first failure exited with code 2 (a usage or config error) or
// the launcher got SIGINT/SIGTERM/SIGHUP. Each restart is announced on
// options.stderr_fd with the failure that caused it. The exit code is the last
// start's. Throws like launch_cluster() (also for a negative `max_restarts`).
LaunchReport launch_with_restarts(const LaunchOptions& options, int max_restarts);

// What a task's end means: "peer lost: another task failed", "killed by the injected
// fault kill@step=3", "stopped by the launcher", ...
std::string describe_exit(const TaskReport& task);

// The table printed when the job failed: one row per task (task, exit code or signal,
// meaning), the first failure marked. Lines start with "dtrain: launch: ".
// Starts with the root cause (torchrun's "Root Cause" block): the first task that
// failed, when, where, its exit, its last error line and its log; then the table.
std::string format_exit_table(const LaunchReport& report);
// The task of report.first_failure; nullptr when no task failed by itself.
const TaskReport* root_cause(const LaunchReport& report);

}  // namespace dtrain::launch
