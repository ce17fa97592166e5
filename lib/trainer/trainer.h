// The trainer: runs a whole job (fit + evaluate), validates a job without training,
// and measures training throughput for `dtrain bench train`.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "job/job_config.h"
#include "plan/execution_plan.h"
#include "ps/ps_client.h"
#include "rendezvous/store.h"
#include "strategy/planning/memory_estimate.h"
#include "trainer/reporting/utilization.h"

namespace dtrain::comm {
class Communicator;
}
namespace dtrain::strategy {
class StageLinks;
struct GridGroups;
}

namespace dtrain::trainer {

class ElasticState;  // elastic_state.h

// What the process environment says about where to compute (plan/machine.h).
using HostSettings = plan::HostSettings;

struct RunOptions {
  std::string summary_path;  // --summary FILE ("" = none)
  // Called after every training step with the number of steps done. The cluster
  // runtime reports progress and checks the other tasks' health here (and may throw).
  std::function<void(int64_t steps_done)> on_step;
  // Called inside the "data" span before a step's batches are read, with that
  // step's number (1-based): the cluster runtime's injected reader stall.
  std::function<void(int64_t step)> before_batch;
  // The communicators the runtime connected as the plan names them (nullptr where it names none):
  // the job's training tasks as a group (plan.tasks), and the training tasks'
  // NCCL group for the gradients (plan.gradients kNccl), on the plan's device.
  comm::Communicator* workers = nullptr;
  comm::Communicator* gradients = nullptr;
  // pipeline on GPUs (plan.activations kNccl): the NCCL links to the neighbouring
  // stages the runtime connected, where every stage has a GPU of its own; nullptr: Gloo.
  strategy::StageLinks* stage_links = nullptr;
  // A grid (plan.grid): this task's groups in it, which the runtime built.
  strategy::GridGroups* grid = nullptr;
  // Polled before every step: the signal once the process was asked to stop
  // (SIGTERM, SIGINT), else 0. The job then stops after the step, saves a
  // checkpoint and throws Preempted (stop_reason / stop_exit_code of the signal).
  std::function<int()> stop_signal;
  // Write output.dir/metrics.jsonl: in a cluster only the chief does (as in TF).
  bool write_metrics = true;
  // Save a checkpoint after the last epoch even when checkpoint.every_* would not
  // (an evaluator task waits for it), in checkpoint.dir or output.dir/checkpoints.
  bool final_checkpoint = false;
  // parameter_server: this task's part (from the cluster runtime).
  struct ParameterServerRole {
    ps::PsGroup* group = nullptr;        // connections to every ps
    rendezvous::Store* store = nullptr;  // the job's store: the work queue, lost workers
    bool coordinator = false;            // the chief: hands out work, evaluates, checkpoints
    std::string owner;                   // "worker:1#1": task and incarnation, owner of work units
    int worker_index = 0;                // among the training workers (sync: the data shard)
    int num_workers = 1;
    std::vector<std::string> workers;    // the training workers' task names, by worker_index
  } ps;
  // strategy.elastic: the state this task keeps across re-formations of its
  // group (owned by the runtime, which re-runs run_training for each membership).
  ElasticState* elastic = nullptr;
  // Appends "epoch step microseconds index index ..." per completed step (the
  // Unix time in microseconds when it was done, then the dataset index of every
  // sample this task trained on in it); "" = none (DTRAIN_SAMPLE_LOG).
  std::string sample_log;
};

// One change of an elastic job's training tasks, as the chief's summary and
// metrics.jsonl record it.
struct MembershipChange {
  int64_t generation = 0;          // the membership's generation after it (1 after the first loss)
  double unix_time = 0.0;          // when the members agreed on it
  std::vector<std::string> left;   // tasks that were lost ("worker:2")
  std::vector<std::string> joined;  // tasks that came (back) in
  int64_t step = 0;                // the step training went on from
  int training_tasks = 0;          // after it
  int64_t accumulation_steps = 1;  // per update after it (batch "global" raises them)
  std::vector<int64_t> micro_batches;  // each member's micro-batch after it, by rank (strategy::ElasticSplit)
  double reform_seconds = -1.0;    // from the loss seen to the first step done at the new size
  double resumed_unix_time = 0.0;  // when that step was done
};

// What the coordinator of a parameter_server job counts.
struct WorkUnitCounts {
  int64_t total = 0;      // work units of the epochs this run trained
  int64_t completed = 0;  // of those, completed by a live worker
  int64_t requeued = 0;   // handed out again after their worker was lost
  int64_t workers_lost = 0;
};

// One checkpoint evaluated by an evaluator task.
struct Evaluation {
  int64_t step = 0;
  double loss = 0.0;
  double accuracy = 0.0;
  std::string checkpoint;  // its directory
};

// Where a training step's time went, in milliseconds per step (averages over the
// run): waiting for the data pipeline, forward + loss + backward, waiting for the
// gradient all-reduces after backward, the optimizer, the loss/accuracy
// all-reduce across tasks, and everything else (progress, health checks, thread
// hand-offs between replicas).
struct StepBreakdown {
  double step = 0.0, data = 0.0, compute = 0.0, gradient_wait = 0.0, update = 0.0, metrics = 0.0, other = 0.0;
};

struct RunSummary {
  double test_accuracy = -1.0;  // -1 when the job has no test data
  double test_loss = -1.0;
  double train_loss = 0.0;      // last epoch
  double train_accuracy = 0.0;  // last epoch
  int64_t epochs = 0;          // epochs trained to (fewer than train.epochs after early stopping)
  int64_t stopped_epoch = 0;   // train.early_stopping: the epoch it stopped after (1-based), else 0
  int64_t restored_epoch = 0;  // restore_best_weights: the epoch whose parameters the job ends with, else 0
  int64_t steps = 0;
  int64_t global_batch_size = 0;
  double train_samples_per_sec = 0.0;
  // Labels per training sample: > 1 (a sequence's next tokens) reports the loss per
  // token with its perplexity, and tokens/s (tokens_per_sample, train_perplexity, ...).
  int64_t label_width = 1;
  double wall_seconds = 0.0;
  int world_size = 1;            // replicas in sync across the job
  int gradient_accumulation_steps = 1;
  double comm_wait_share = 0.0;  // share of step time spent waiting for gradient all-reduces
  int threads = 1;
  std::string device = "cpu:0";  // where it trained
  std::string params_sha256;
  std::string strategy_report;  // Strategy::report_json(): kept under the strategy's name
  // Bytes of optimizer slots this task held (1/N of them under ZeRO-1).
  int64_t optimizer_state_bytes = 0;
  // train.precision mixed_float16: the dynamic loss scale at the end, and the
  // steps skipped for inf/NaN gradients (all of them, a resumed run's included).
  std::optional<double> loss_scale;
  int64_t loss_scale_skipped_steps = 0;
  std::optional<StepBreakdown> step_ms;      // the training loop's tasks (not parameter_server's)
  std::optional<WorkUnitCounts> work_units;  // parameter_server's coordinator
  std::optional<std::vector<Evaluation>> evaluations;  // an evaluator task, oldest first
  // The memory estimate this task was checked against runtime.memory_limit with.
  std::optional<strategy::MemoryEstimate> memory;
  // What the system counted resident (core/process_memory.h): before the model
  // was built, what loading the data added, and the peak during the training
  // loop (measured from its start where the system lets the peak be reset, else
  // from the process's). The training's own: peak - before_model - data.
  struct MeasuredMemory {
    int64_t before_model = 0, data = 0, peak = 0;
    bool peak_from_loop = false;
    int64_t training() const { return peak - before_model - data; }
  };
  std::optional<MeasuredMemory> measured_memory;
  // strategy.elastic: every change of the training tasks, oldest first.
  std::vector<MembershipChange> membership_changes;
  // A language model with attention layers: tokens/s, FLOPs per token, MFU
  // against the device's peak, peak memory (utilization.h).
  std::optional<Utilization> utilization;
};

// Trains and evaluates the job as `plan` says (plan/execution_plan.h), printing
// progress to stdout, writing output.dir/metrics.jsonl and, if asked, the summary JSON.
RunSummary run_training(const job::JobConfig& job, const plan::ExecutionPlan& plan, const RunOptions& options);

// An evaluator task (TF's side-car evaluation): trains nothing, watches the
// checkpoint directory and evaluates each new complete checkpoint on
// data.validation, else data.test, oldest first.
struct EvaluatorOptions {
  std::string summary_path;  // --summary FILE ("" = none)
  // Asked between looks at the directory: the training's final step once it
  // ended (its final checkpoint is then saved), else nullopt. The cluster runtime
  // checks the job's health here (and may throw: a lost chief).
  std::function<std::optional<int64_t>()> training_done;
  double poll_seconds = 0.25;
};
// Where the job's checkpoints go: checkpoint.dir, else output.dir/checkpoints,
// else "" (none). A parameter_server job's ps tasks write their shards there too.
std::string checkpoint_dir(const job::JobConfig& job);
// A run that starts afresh (neither checkpoint.resume nor output.overwrite)
// where an earlier run's results are (a non-empty metrics.jsonl in output.dir,
// checkpoints in checkpoint_dir): ConfigError naming them and the ways on
// (--resume, another output.dir, --overwrite). Returns quietly otherwise.
void check_fresh_output(const job::JobConfig& job);
// output.overwrite (and not resuming): removes an earlier run's results, so that
// none of them mixes with this run's (its checkpoints, which a later --resume
// would take when their steps are higher; its metrics.jsonl; its TensorBoard
// event files). Logs and files dtrain does not write stay.
void clear_earlier_results(const job::JobConfig& job);

// Evaluates until the checkpoint of the final step is done, writing one
// {"kind": "eval"} record per checkpoint to output.dir/eval/metrics.jsonl and the
// summary's "evaluations".
RunSummary run_evaluator(const job::JobConfig& job, const plan::ExecutionPlan& plan, const EvaluatorOptions& options);
// ConfigError unless the job gives an evaluator work: a checkpoint directory
// (checkpoint.dir or output.dir) and data.test or data.validation.
void check_evaluator_job(const job::JobConfig& job);

// Checks everything that can be checked without training: the model's shapes,
// the data files' headers and sizes, input shape against the data, and prints
// the task's plan (what would run where). Prints what it checked; throws
// ConfigError / IoError on the first problem.
void validate_job(const job::JobConfig& job, const plan::ExecutionPlan& plan);

struct BenchOptions {
  int64_t steps = 100;        // timed steps
  int64_t warmup_steps = 10;  // untimed steps first (primitive creation, caches)
  int64_t profile_steps = 0;  // > 0: after the timed steps, this many more with per-layer timing
};

// Where a step's time goes, per layer (from profiled steps, averaged per step).
// The layers inside a Residual block follow it with depth + 1; the block's time
// includes theirs.
struct LayerProfile {
  std::string name, type;
  int depth = 0;
  double forward_ms = 0.0, backward_ms = 0.0;
};

struct BenchResult {
  double samples_per_sec = 0.0;
  double seconds = 0.0;
  int64_t steps = 0;
  int64_t batch_size = 0;
  int threads = 1;
  double comm_wait_share = 0.0;
  std::string device = "cpu:0";
  std::string precision = "float32";  // train.precision
  std::string cpu_bf16;               // mixed_bfloat16 on the CPU: "native", "converted" or "emulated"
  std::vector<LayerProfile> profile;  // with profile_steps > 0
  double profile_step_ms = 0.0;       // mean step time of the profiled steps (loss, update, data and the
                                      // waits around each layer included)
  // A language model with attention layers: tokens/s, FLOPs, MFU, peak memory
  // (utilization.h; the GEMM probe runs after the timed steps).
  std::optional<Utilization> utilization;
};

// Times training steps (data pipeline included) on the job's training data.
BenchResult bench_train(const job::JobConfig& job, const plan::ExecutionPlan& plan, const BenchOptions& options);

}  // namespace dtrain::trainer
