// dtrain's entry point: the CLI11 command line, and the one place where errors
// become messages and exit codes (see README "Exit codes").
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli_help.h"
#include "commands.h"
#include "openmp_wait.h"
#include "core/error.h"
#include "core/log.h"

namespace {

using dtrain::ExitCode;
using dtrain::to_int;
using dtrain::app::number_at_least;
using dtrain::app::seconds_at_least;
using dtrain::app::whole_at_least;
using dtrain::app::whole_between;

void add_job_options(CLI::App* cmd, dtrain::app::JobOptions& job) {
  cmd->add_option("--config,-c", job.config, "Job config (JSON)")->required();
  cmd->add_option("--set", job.overrides,
                  "Override a config value, e.g. --set train.epochs=1 (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  cmd->add_option("--threads", job.threads,
                  "Compute threads (default: runtime.threads, else OMP_NUM_THREADS, else the cores shared by the tasks on this host)")
      ->check(whole_at_least(1));
}

int print_error(const std::string& message, ExitCode code) {
  // In a cluster the log prefix names the task: "dtrain: error: [worker:1] ...".
  std::fprintf(stderr, "%s\n", dtrain::log::line("error: ", message).c_str());
  return to_int(code);
}

}  // namespace

int main(int argc, char** argv) {
  // First: it may execute dtrain again with GOMP_SPINCOUNT set (openmp_wait.h).
  dtrain::app::settle_openmp_wait(argc, argv);
  // Lines reach a pipe (dtrain launch's prefixer, a log collector) as they are
  // printed, not in blocks of 4 KiB at exit (what PYTHONUNBUFFERED asks of Python).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Every environment variable dtrain reads, read once (runtime/environment.h);
  // logging's first (DTRAIN_LOG_LEVEL, DTRAIN_TASK_LOG) before any line.
  const dtrain::runtime::Environment env = dtrain::runtime::Environment::from_process();
  dtrain::log::set_level(dtrain::log::level_named(env.log_level));
  dtrain::log::set_task_log_file(env.task_log);
  CLI::App app{"dtrain: distributed deep-learning training from a JSON job description", "dtrain"};
  app.require_subcommand(0, 1);  // none: the help (below)
  app.footer(dtrain::app::main_help_footer());
  app.set_version_flag("--version", std::string("dtrain ") + DTRAIN_VERSION);

  dtrain::app::RunOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "Train the model a job config describes");
  add_job_options(run_cmd, run.job);
  run_cmd->add_option("--summary", run.summary, "Write a JSON summary of the run to FILE");
  run_cmd->add_option("--task", run.task, "This task, TYPE:INDEX (default: TF_CONFIG's task, else the config's)");
  run_cmd->add_flag("--resume", run.resume, "Continue from the newest good checkpoint (checkpoint.resume=auto)");
  run_cmd->add_flag("--overwrite", run.overwrite,
                    "Replace an earlier run's results in output.dir (output.overwrite=true); without it or --resume, "
                    "a run refuses to overwrite them");
  run_cmd->footer(dtrain::app::run_help_footer());

  dtrain::app::LaunchOptions launch;
  CLI::App* launch_cmd = app.add_subcommand(
      "launch", "Run every task of the job's cluster as a local process (a multi-port simulation)");
  add_job_options(launch_cmd, launch.job);
  launch_cmd->footer(dtrain::app::launch_help_footer());
  launch_cmd->add_option("--summary", launch.summary,
                         "Write the tasks' exit codes and run summaries to FILE (JSON)");
  launch_cmd
      ->add_option("--workers", launch.workers_text,
                   "Build a localhost cluster of N workers on free ports (instead of the "
                   "config's or TF_CONFIG's cluster); M:N (torchrun's spelling) starts N and makes the job "
                   "elastic: it goes on while at least M training tasks are left (strategy.elastic)")
      ->check(
          [](const std::string& text) {
            dtrain::app::LaunchOptions parsed;
            try {
              dtrain::app::parse_workers(text, parsed);
            } catch (const dtrain::ConfigError& e) {
              return std::string(e.what());
            }
            return std::string();
          },
          "N or M:N")
      ->each([&launch](const std::string& text) { dtrain::app::parse_workers(text, launch); });
  launch_cmd->add_option("--ps", launch.ps, "With --workers: M parameter-server tasks")
      ->check(whole_at_least(0));
  launch_cmd->add_flag("--chief", launch.chief, "With --workers: add a chief task");
  launch_cmd->add_flag("--evaluator", launch.evaluator, "With --workers: add an evaluator task");
  launch_cmd->add_flag("--resume", launch.resume,
                       "Every task continues from the job's newest good checkpoint (as dtrain run --resume)");
  launch_cmd->add_flag("--overwrite", launch.overwrite,
                       "Replace an earlier run's results in output.dir (as dtrain run --overwrite)");
  launch_cmd
      ->add_option("--console", launch.console,
                   "lead (default): the chief's and an evaluator's lines (the chief's progress bar live on a terminal), the other tasks' "
                   "warnings and errors; all: every task's lines. Each task's log file has all of its lines")
      ->check(CLI::IsMember({"lead", "all"}));
  launch_cmd->add_option("--inject", launch.injections,
                         "Fault injection, e.g. kill:worker:1@step=20 (SIGKILL that task at that "
                         "step) or kill:worker:0@ckpt_byte=N (SIGKILL it once it has written N bytes "
                         "of checkpoint files) or stall_reader:worker:1@step=20 (its data reader blocks at that step: "
                         "a hang the chief's hang report names); repeatable")
      ->take_all()
      ->allow_extra_args(false);
  launch_cmd->add_option("--grace-period", launch.grace_period,
                         "Seconds the other tasks get to stop by themselves after one fails, and "
                         "again between SIGTERM and SIGKILL (default 5)")
      ->check(seconds_at_least(0));
  launch_cmd->add_option("--hostfile", launch.hostfile,
                         "Run the tasks on other hosts over ssh: a file of 'HOST slots=N' lines (DeepSpeed/MPI "
                         "style); every slot is a worker, the first host's first slot the chief");
  launch_cmd->add_option("--port-base", launch.port_base,
                         "With --hostfile: a host's k-th slot listens on PORT_BASE + k (default 8888)")
      ->check(whole_between(1, 65535));
  launch_cmd->add_option("--ssh-option", launch.ssh_options, "With --hostfile: an ssh -o OPTION=VALUE (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  launch_cmd->add_option("--ssh-identity", launch.ssh_identity, "With --hostfile: ssh's identity file (ssh -i)");
  launch_cmd->add_option("--ssh-port", launch.ssh_port, "With --hostfile: ssh's port (ssh -p)")
      ->check(whole_between(1, 65535));
  launch_cmd->add_option("--remote-dtrain", launch.remote_dtrain,
                         "With --hostfile: the dtrain binary on the hosts (default: this binary's path)");
  launch_cmd->add_option("--max-restarts", launch.max_restarts,
                         "When a task fails, start the whole job again from the newest checkpoint "
                         "(checkpoint.resume=auto), up to N times (default 0)")
      ->check(whole_at_least(0));

  dtrain::app::ValidateOptions validate;
  CLI::App* validate_cmd =
      app.add_subcommand("validate", "Check a job config, its model and its data without training");
  add_job_options(validate_cmd, validate.job);
  validate_cmd->add_option("--task", validate.task, "This task, TYPE:INDEX (checks its address can be bound)");
  validate_cmd->add_flag("--json", validate.json,
                         "Print the execution plan (what runs where, connected how, and why) as one JSON object, "
                         "the last line of the output");

  dtrain::app::ClusterOptions cluster;
  CLI::App* cluster_cmd = app.add_subcommand(
      "cluster", "Print the cluster this task resolves (runtime.cluster_resolver: TF_CONFIG, Slurm, Kubernetes), "
                 "its own task and where they came from");
  cluster_cmd->add_option("--config,-c", cluster.config, "Job config (optional: its runtime section and cluster keys)");
  cluster_cmd->add_option("--set", cluster.overrides, "Override a config value (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  cluster_cmd->add_option("--task", cluster.task, "This task, TYPE:INDEX");
  cluster_cmd->add_flag("--json", cluster.json, "Print one JSON object");

  dtrain::app::BenchTrainOptions bench;
  CLI::App* bench_cmd = app.add_subcommand("bench", "Benchmarks");
  bench_cmd->require_subcommand(1);
  CLI::App* bench_train = bench_cmd->add_subcommand("train", "Training throughput (samples/s) of a job");
  add_job_options(bench_train, bench.job);
  bench_train->add_option("--steps", bench.steps, "Timed steps")->check(whole_at_least(1));
  bench_train->add_option("--warmup", bench.warmup, "Untimed steps before timing")->check(whole_at_least(0));
  bench_train->add_option("--batch", bench.batch, "Batch size (default: the config's)")->check(whole_at_least(1));
  bench_train->add_option("--profile", bench.profile,
                          "After the timed steps, N more with per-layer forward/backward times")
      ->check(whole_at_least(1));
  bench_train->add_flag("--json", bench.json, "Print one JSON object");
  dtrain::app::BenchAllReduceOptions allreduce;
  CLI::App* bench_allreduce = bench_cmd->add_subcommand(
      "allreduce", "All-reduce bandwidth (nccl-tests style) of N local workers over Gloo, or of NCCL over the local GPUs");
  bench_allreduce->add_option("--workers", allreduce.workers,
                              "Local worker processes (at least 2); with --device gpu: GPUs to use (default: all)");
  bench_allreduce->add_option("--device", allreduce.device,
                              "cpu: Gloo between worker processes (default); gpu: NCCL, one thread per local GPU")
      ->check(CLI::IsMember({"cpu", "gpu"}));
  bench_allreduce->add_option("--sizes", allreduce.sizes, "Sizes: MIN:MAX (powers of two) or a list, e.g. 4K:64M");
  bench_allreduce->add_option("--iterations", allreduce.iterations, "Timed all-reduces per size")->check(whole_at_least(1));
  bench_allreduce->add_option("--warmup", allreduce.warmup, "Untimed all-reduces per size")->check(whole_at_least(0));
  bench_allreduce->add_flag("--json", allreduce.json, "One JSON object per size");
  bench_allreduce->add_option("--communication", allreduce.communication,
                              "auto, ring or hierarchical (shared memory between the tasks of a machine), as "
                              "strategy.communication")
      ->check(CLI::IsMember({"auto", "ring", "hierarchical"}));
  bench_allreduce->add_option("--connections", allreduce.connections,
                              "Gloo's pairs: neighbours (the ranks its collectives need, about 2 log2 N; the default) or "
                              "full-mesh (every other rank)")
      ->check(CLI::IsMember({"neighbours", "full-mesh"}));
  bench_allreduce->add_option("--threads", allreduce.threads, "Accepted for symmetry; the all-reduce uses Gloo's own threads");
  dtrain::app::BenchPipelineOptions bench_pipeline;
  CLI::App* bench_pipeline_cmd = bench_cmd->add_subcommand(
      "pipeline", "Pipeline parallelism: measured bubble against (S-1)/(M+S-1), held activations per stage, samples/s "
                  "against multi_worker_mirrored on as many local tasks");
  add_job_options(bench_pipeline_cmd, bench_pipeline.job);
  bench_pipeline_cmd->add_option("--stages", bench_pipeline.stages, "Stages (one local task each; split \"auto\")")
      ->check(whole_between(2, 64));
  bench_pipeline_cmd->add_option("--micro-batches", bench_pipeline.micro_batches, "Micro-batches per step")
      ->check(whole_at_least(1));
  bench_pipeline_cmd->add_option("--steps", bench_pipeline.steps, "Training steps of each run")->check(whole_at_least(1));
  bench_pipeline_cmd->add_flag("--json", bench_pipeline.json, "One JSON object per run");
  dtrain::app::BenchPsOptions bench_ps;
  CLI::App* bench_ps_cmd = bench_cmd->add_subcommand(
      "ps", "Push and pull bandwidth per ps task (nccl-tests style) of N local workers and M ps tasks");
  bench_ps_cmd->add_option("--workers", bench_ps.workers, "Local worker processes")->check(whole_at_least(1));
  bench_ps_cmd->add_option("--ps", bench_ps.ps, "Local ps tasks (1)")->check(whole_at_least(1));
  bench_ps_cmd->add_option("--sizes", bench_ps.sizes,
                           "Variable sizes: MIN:MAX (powers of two) or a list, e.g. 4K:64M; split over the ps tasks");
  bench_ps_cmd->add_option("--iterations", bench_ps.iterations, "Timed pulls and pushes per size")
      ->check(whole_at_least(1));
  bench_ps_cmd->add_option("--warmup", bench_ps.warmup, "Untimed pulls and pushes per size")
      ->check(whole_at_least(0));
  bench_ps_cmd->add_flag("--json", bench_ps.json, "One JSON object per size");
  dtrain::app::BenchRendezvousOptions bench_rendezvous;
  CLI::App* bench_rendezvous_cmd = bench_cmd->add_subcommand(
      "rendezvous", "The chief's store against N simulated tasks in this process: time to the barrier, requests/s, "
                    "the chief's CPU per heartbeat round, the time to detect a killed task");
  bench_rendezvous_cmd->add_option("--tasks", bench_rendezvous.tasks, "Task counts, comma-separated (8,64,512,4096)");
  bench_rendezvous_cmd->add_option("--heartbeat-interval", bench_rendezvous.heartbeat_interval,
                                   "Seconds between heartbeats, as runtime.heartbeat_interval")
      ->check(CLI::Range(0.05, 60.0));
  bench_rendezvous_cmd->add_option("--heartbeat-timeout", bench_rendezvous.heartbeat_timeout,
                                   "Seconds of silence before a task is lost, as runtime.heartbeat_timeout")
      ->check(CLI::Range(0.5, 600.0));
  bench_rendezvous_cmd->add_flag("--json", bench_rendezvous.json, "One JSON object per task count");
  bench_rendezvous_cmd->add_option("--slice", bench_rendezvous.slice, "(internal: a worker process of the benchmark)")
      ->group("");

  CLI::App* ckpt_cmd = app.add_subcommand("ckpt", "Checkpoints: inspect them, export the weights");
  ckpt_cmd->require_subcommand(1);
  dtrain::app::CkptInspectOptions ckpt_inspect;
  CLI::App* ckpt_inspect_cmd = ckpt_cmd->add_subcommand(
      "inspect", "Print a checkpoint's manifest and tensors (DIR: one checkpoint, or a directory of them)");
  ckpt_inspect_cmd->add_option("DIR", ckpt_inspect.dir, "Checkpoint, or checkpoint directory")->required();
  ckpt_inspect_cmd->add_flag("--json", ckpt_inspect.json, "Print one JSON object: manifest and per-tensor statistics");
  dtrain::app::CkptExportOptions ckpt_export;
  CLI::App* ckpt_export_cmd = ckpt_cmd->add_subcommand(
      "export", "Write a checkpoint's model weights (Keras-style names) to one safetensors file");
  ckpt_export_cmd->add_option("DIR", ckpt_export.dir, "Checkpoint, or checkpoint directory (newest good)")->required();
  ckpt_export_cmd->add_option("--to", ckpt_export.to, "Output .safetensors file")->required();

  dtrain::app::BenchAttentionOptions bench_attention;
  CLI::App* bench_attention_cmd = bench_cmd->add_subcommand(
      "attention", "Causal attention alone (forward + backward): time and the peak memory it adds");
  bench_attention_cmd->add_option("--seq", bench_attention.seq, "Sequence length")->check(whole_at_least(1));
  bench_attention_cmd->add_option("--batch", bench_attention.batch, "Sequences")->check(whole_at_least(1));
  bench_attention_cmd->add_option("--heads", bench_attention.heads, "Heads")->check(whole_at_least(1));
  bench_attention_cmd->add_option("--head-dim", bench_attention.head_dim, "Values per head")->check(whole_at_least(1));
  bench_attention_cmd->add_option("--threads", bench_attention.threads, "Compute threads")->check(whole_at_least(1));
  bench_attention_cmd->add_option("--device", bench_attention.device, "cpu (default), gpu or cuda:N");
  bench_attention_cmd
      ->add_option("--gpu-kernels", bench_attention.gpu_kernels,
                   "On a GPU: matmul (cuBLASLt products), rows (a row kernel per query) or auto (default)")
      ->check(CLI::IsMember({"auto", "matmul", "rows"}));
  bench_attention_cmd->add_option("--steps", bench_attention.steps, "Timed calls")->check(whole_at_least(1));
  bench_attention_cmd->add_option("--warmup", bench_attention.warmup, "Untimed calls")->check(whole_at_least(0));
  bench_attention_cmd->add_flag("--json", bench_attention.json, "One JSON object");

  dtrain::app::GenerateCommandOptions generate;
  CLI::App* generate_cmd = app.add_subcommand(
      "generate", "Print text sampled from a trained byte-level language model (its newest good checkpoint)");
  add_job_options(generate_cmd, generate.job);
  generate_cmd->add_option("--checkpoint", generate.checkpoint,
                           "A checkpoint, or a directory of them (default: the job's checkpoint directory)");
  generate_cmd->add_option("--prompt", generate.prompt, "Text the generated text continues");
  generate_cmd->add_option("--max-tokens", generate.max_tokens,
                           "Tokens (bytes) to generate, at most 1000000 (printed when all are made)")
      ->check(whole_between(0, 1000000));
  generate_cmd->add_option("--temperature", generate.temperature, "Softmax temperature; 0: the most likely token")
      ->check(number_at_least(0));
  generate_cmd->add_option("--top-k", generate.top_k, "Sample among the K most likely tokens (0: all)")
      ->check(whole_at_least(0));
  generate_cmd->add_option("--seed", generate.seed, "Sampling seed");

  bool devices_json = false;
  CLI::App* devices_cmd = app.add_subcommand("devices", "List the GPUs dtrain can use, or say why there are none");
  devices_cmd->add_flag("--json", devices_json, "Print JSON");

  CLI::App* version_cmd = app.add_subcommand("version", "Print the version");

  CLI::App* reference_cmd = app.add_subcommand(
      "reference", "Print the job config reference tables (layers, losses, optimizers, schedules, data formats, "
                   "strategies) as Markdown, from the registries");

  if (argc == 1) {  // plain `dtrain`: what it can do, not an error
    std::printf("%s", app.help().c_str());
    return 0;
  }
  if (const std::string bad_set = dtrain::app::check_set_arguments(argc, argv); !bad_set.empty())
    return print_error(bad_set, ExitCode::kConfig);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Words CLI11 could not place ("dtrain train", "run --epochs 1", "bench trian"):
    // dtrain's own words with the closest command or option; else CLI11's.
    const std::string said = dtrain::app::unexpected_arguments_text(app);
    return print_error((said.empty() ? std::string(e.what()) : said) + " (run '" + dtrain::app::help_command(app) +
                           "' for usage)",
                       ExitCode::kConfig);
  }

  try {
    if (run_cmd->parsed()) return dtrain::app::run_command(run, env);
    if (bench_rendezvous_cmd->parsed()) return dtrain::app::bench_rendezvous_command(bench_rendezvous);
    if (launch_cmd->parsed()) return dtrain::app::launch_command(launch, env);
    if (validate_cmd->parsed()) return dtrain::app::validate_command(validate, env);
    if (cluster_cmd->parsed()) return dtrain::app::cluster_command(cluster, env);
    if (bench_train->parsed()) return dtrain::app::bench_train_command(bench, env);
    if (bench_allreduce->parsed()) return dtrain::app::bench_allreduce_command(allreduce, env);
    if (bench_pipeline_cmd->parsed()) return dtrain::app::bench_pipeline_command(bench_pipeline, env);
    if (bench_ps_cmd->parsed()) return dtrain::app::bench_ps_command(bench_ps, env);
    if (ckpt_inspect_cmd->parsed()) return dtrain::app::ckpt_inspect_command(ckpt_inspect);
    if (ckpt_export_cmd->parsed()) return dtrain::app::ckpt_export_command(ckpt_export);
    if (bench_attention_cmd->parsed()) return dtrain::app::bench_attention_command(bench_attention);
    if (generate_cmd->parsed()) return dtrain::app::generate_command(generate);
    if (devices_cmd->parsed()) return dtrain::app::devices_command(devices_json);
    if (version_cmd->parsed()) return dtrain::app::version_command();
    if (reference_cmd->parsed()) return dtrain::app::reference_command();
  } catch (const dtrain::Error& e) {
    return print_error(e.what(), e.exit_code());
  } catch (const std::bad_alloc&) {
    return print_error("out of memory", ExitCode::kRuntime);
  } catch (const std::exception& e) {
    return print_error(std::string("unexpected failure: ") + e.what(), ExitCode::kRuntime);
  }
  return print_error("no command given (run 'dtrain --help')", ExitCode::kConfig);
}
