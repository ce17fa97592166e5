// One options struct and one function per subcommand (CLI11-free, so that only
// main.cpp pays CLI11's compile time). Each function returns the exit code.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "job/job_config.h"
#include "runtime/environment.h"
#include "trainer/trainer.h"

namespace dtrain::app {

// Options every job-reading command shares.
struct JobOptions {
  std::string config;                  // --config FILE
  std::vector<std::string> overrides;  // --set key.path=value (repeatable)
  int threads = 0;                     // --threads N (0 = from the config / environment)
};

struct RunOptions {
  JobOptions job;
  std::string summary;  // --summary FILE
  std::string task;     // --task TYPE:INDEX ("" = from TF_CONFIG or the job file)
  bool resume = false;  // --resume: checkpoint.resume=auto
  bool overwrite = false;  // --overwrite: output.overwrite=true
};

struct ValidateOptions {
  JobOptions job;
  std::string task;   // --task TYPE:INDEX
  bool json = false;  // --json: the execution plan as one JSON object, the last line
};

struct ClusterOptions {
  std::string config;                  // --config FILE (optional: its runtime section and cluster keys)
  std::vector<std::string> overrides;  // --set
  std::string task;                    // --task TYPE:INDEX
  bool json = false;                   // --json
};

struct BenchTrainOptions {
  JobOptions job;
  long long steps = 100;
  long long warmup = 10;
  long long batch = 0;  // 0 = the config's batch_size_per_replica
  long long profile = 0;  // > 0: this many extra steps with per-layer timing
  bool json = false;
};

// `dtrain bench pipeline`: the job under pipeline parallelism (both schedules)
// against multi_worker_mirrored on as many tasks (bench_pipeline.cpp).
struct BenchPipelineOptions {
  JobOptions job;
  int stages = 4;          // --stages S: tasks, one stage each ("auto" split)
  int micro_batches = 8;   // --micro-batches M
  long long steps = 30;    // --steps: timed training steps of each run
  bool json = false;       // --json: one JSON object per run
};

// `dtrain launch`: the job's cluster as local processes (lib/launch/launcher.h).
struct LaunchOptions {
  JobOptions job;                       // --config, --set and --threads go to every task
  std::string summary;                  // --summary FILE: exit codes and every task's summary
  int workers = 0;                      // --workers N: a localhost cluster on free ports
  int min_workers = 0;                  // --workers M:N: M (the job is elastic); 0: N alone
  std::string workers_text;             // --workers as given
  int ps = 0;                           // --ps M
  bool chief = false;                   // --chief
  bool evaluator = false;               // --evaluator
  std::vector<std::string> injections;  // --inject kill:worker:1@step=20 (repeatable)
  double grace_period = 5.0;            // --grace-period SECONDS
  int max_restarts = 0;                 // --max-restarts N: restart a failed job from its checkpoint
  std::string hostfile;                 // --hostfile FILE: "host slots=N" lines; the tasks run there over ssh
  int port_base = 8888;                 // --port-base: a host's k-th slot listens on port_base + k
  std::vector<std::string> ssh_options; // --ssh-option OPTION=VALUE (repeatable), as ssh -o
  std::string ssh_identity;             // --ssh-identity FILE, as ssh -i
  int ssh_port = 0;                     // --ssh-port N, as ssh -p
  std::string remote_dtrain;            // --remote-dtrain PATH ("" = this binary's path)
  std::string console = "lead";         // --console lead|all: which tasks' lines the terminal shows
  bool resume = false;                  // --resume: every task continues from the newest good checkpoint
  bool overwrite = false;               // --overwrite: output.overwrite=true for every task
};

// `--workers N` or `M:N` into `options` (workers N, min_workers M); ConfigError
// for anything else, or M above N.
void parse_workers(const std::string& text, LaunchOptions& options);

int run_command(const RunOptions& options, const runtime::Environment& env);
int launch_command(const LaunchOptions& options, const runtime::Environment& env);
int validate_command(const ValidateOptions& options, const runtime::Environment& env);
// `dtrain cluster`: the resolved cluster, this task and where they came from.
int cluster_command(const ClusterOptions& options, const runtime::Environment& env);

// Installs a SIGTERM handler (and a thread that waits for SIGTERM and SIGINT) and
// returns the trainer's stop_signal poll: the job finishes its step, saves a
// checkpoint and exits with code 6 (preemption) or 130 (Ctrl-C).
std::function<int()> stop_on_sigterm();

int bench_train_command(const BenchTrainOptions& options, const runtime::Environment& env);
int bench_pipeline_command(const BenchPipelineOptions& options, const runtime::Environment& env);

struct BenchAllReduceOptions {
  int workers = 0;                     // --workers N: launch N local tasks (0: this is one of them)
  std::string sizes = "4K:64M";        // --sizes
  int iterations = 20;                 // timed all-reduces per size
  int warmup = 5;
  bool json = false;
  int threads = 0;                     // --threads: accepted, unused (the all-reduce uses Gloo's own threads)
  std::string communication = "auto";  // --communication auto|ring|hierarchical
  std::string device = "cpu";          // --device cpu (Gloo between processes) | gpu (NCCL over the local GPUs)
  std::string connections = "neighbours";  // --connections neighbours|full-mesh (Gloo's pairs)
};
int bench_allreduce_command(const BenchAllReduceOptions& options, const runtime::Environment& env);
// `dtrain bench ps` (bench_cluster.cpp, beside `bench allreduce`): push/pull bandwidth of local workers and ps tasks.
struct BenchPsOptions {
  int workers = 0;               // --workers N: launch N local workers (0: this is one task of the cluster)
  int ps = 1;                    // --ps M
  std::string sizes = "4K:64M";  // --sizes
  int iterations = 20;           // timed pulls and pushes per size
  int warmup = 5;
  bool json = false;
};
int bench_ps_command(const BenchPsOptions& options, const runtime::Environment& env);
// `dtrain bench rendezvous` (bench_rendezvous.cpp): the chief's store against
// N simulated tasks in this process (rendezvous/bench_rendezvous.h), per N.
struct BenchRendezvousOptions {
  std::string tasks = "8,64,512,4096";  // --tasks: comma-separated counts
  double heartbeat_interval = 1.0;
  double heartbeat_timeout = 10.0;
  int heartbeat_rounds = 3;  // heartbeat rounds timed for the server's CPU
  bool json = false;
  std::string slice;  // --slice FIRST:COUNT: this is one of the benchmark's worker processes
};
int bench_rendezvous_command(const BenchRendezvousOptions& options);
// Lists the usable GPUs (name, memory, compute capability), or says why there
// are none (no CUDA backend, no driver, no device). Exit code 0 either way.
int devices_command(bool json);
int version_command();
// The job config reference tables (docs/config-reference.md), from the registries (job/reference.h).
int reference_command();

// `dtrain ckpt inspect DIR` (ckpt_command.cpp): DIR is one checkpoint or a directory of them.
struct CkptInspectOptions {
  std::string dir;
  bool json = false;  // --json: one JSON object (manifest, per-tensor count/sum/min/max)
};
int ckpt_inspect_command(const CkptInspectOptions& options);

// `dtrain ckpt export DIR --to FILE`: the model parameters as one safetensors file.
struct CkptExportOptions {
  std::string dir;
  std::string to;  // --to FILE
};
int ckpt_export_command(const CkptExportOptions& options);

// `dtrain bench attention`: causal attention alone, forward + backward (bench_attention.cpp).
struct BenchAttentionOptions {
  long long batch = 1, heads = 4, head_dim = 32, seq = 512;
  std::string device = "cpu";  // a job's "device" value: cpu, gpu, cuda:N
  std::string gpu_kernels = "auto";  // kernels::GpuAttention's name: auto, matmul, rows
  int threads = 2;
  int steps = 20, warmup = 3;
  bool json = false;
};
int bench_attention_command(const BenchAttentionOptions& options);

// `dtrain generate --config F [--checkpoint DIR] --prompt TEXT ...`: text from a
// trained byte-level language model (trainer/tasks/generate.h).
struct GenerateCommandOptions {
  JobOptions job;
  std::string checkpoint;
  std::string prompt;
  long long max_tokens = 200;
  double temperature = 1.0;
  long long top_k = 0;
  unsigned long long seed = 1;
};
int generate_command(const GenerateCommandOptions& options);

}  // namespace dtrain::app
