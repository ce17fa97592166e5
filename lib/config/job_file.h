// The parts of a job file that lib/config reads itself: the top-level document
// (JSON text, --set overrides, the normalised and agreement texts), `device`, and
// the train, runtime, output and checkpoint sections; plus TF_CONFIG's cluster and
// task keys (cluster_spec.h). The vocabulary sections (model, loss, optimizer,
// data, strategy) are read by the modules that own them, through section.h, and
// the whole job is put together by lib/job.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "config/kubernetes.h"
#include "config/section.h"

namespace dtrain::config {

// What a Keras callback watches at each epoch's end ("val_loss", "loss",
// "val_accuracy", "accuracy") and which way is better.
struct MonitorSpec {
  std::string path;                 // where `monitor` is, for messages ("train.early_stopping")
  std::string monitor = "val_loss";
  std::string mode = "auto";        // "min", "max", or "auto": max for accuracy, min for loss
  bool maximize() const;
};

// train.early_stopping, as Keras' EarlyStopping callback.
struct EarlyStoppingSpec {
  bool enabled = false;
  MonitorSpec monitor;
  double min_delta = 0.0;           // an improvement must beat the best by more than this
  int64_t patience = 0;             // epochs without improvement before stopping
  std::optional<double> baseline;   // the value to beat before `wait` resets
  bool restore_best_weights = false;  // end with the best epoch's parameters
  int64_t start_from_epoch = 0;     // epochs before the monitor is looked at
};

// train.precision, Keras' mixed precision policy names: compute (matmul,
// convolution, activations) in the low precision, variables, optimizer state,
// the loss, softmax and batch-norm statistics in float32.
enum class Precision { kFloat32, kMixedBfloat16, kMixedFloat16 };
const char* precision_name(Precision p);

struct TrainSpec {
  std::string path = "train";
  int64_t epochs = 1;
  int64_t batch_size_per_replica = 32;
  uint64_t seed = 1;
  int64_t steps_per_epoch = 0;     // 0 = a full pass over the (sharded) training data
  int64_t log_every_steps = 100;   // metrics.jsonl step records (0 = epoch records only)
  int64_t eval_batch_size = 0;     // 0 = batch_size_per_replica
  int64_t gradient_accumulation_steps = 1;  // micro-batches per update (one all-reduce each)
  // Accepted for TF users (tf.config.experimental.enable_op_determinism): dtrain's
  // CPU path is always deterministic for a given seed and thread count.
  bool deterministic = true;
  EarlyStoppingSpec early_stopping;
  Precision precision = Precision::kFloat32;
};

struct RuntimeSpec {
  std::string path = "runtime";
  int64_t threads = 0;               // 0 = OMP_NUM_THREADS when set, else the cores shared by the tasks on this host
  double rendezvous_timeout = 300.0; // seconds a task waits for the others to join
  double heartbeat_interval = 1.0;   // seconds between heartbeats on the control channel
  double heartbeat_timeout = 10.0;   // seconds of silence after which a task is declared lost
  // Seconds without any task's step advancing (heartbeats still coming) after which
  // the chief asks every task where it is and prints one hang report (a warning;
  // the job goes on). 0 = never. Below the collective deadline (heartbeat_timeout
  // + 20 s, 30 s by default), so that a hang is reported before it ends the job.
  double stall_timeout = 20.0;
  std::string secret_file;           // file holding the job secret (else DTRAIN_JOB_SECRET)
  std::string job_id;                // names the job in the handshake ("" = derived from the config)
  // Where the cluster comes from (cluster_resolver.h): auto | tf_config | slurm | kubernetes | env.
  std::string cluster_resolver = "auto";
  int64_t port_base = 8888;          // slurm: the k-th task on a node listens on port_base + k (TF's default)
  // slurm: task type -> count for the first tasks ({"ps": 1, "worker": 3}, types in
  // name order as TF's `jobs`); empty: every task is a worker.
  std::vector<std::pair<std::string, int>> slurm_jobs;
  KubernetesOptions kubernetes;      // kubernetes: job, service, replicas, port (else their variables)
  // Bytes a training task may hold by dtrain's memory estimate (parameters, gradients,
  // optimizer slots, activations: strategy/planning/memory_estimate.h); a job over it stops
  // before training. 0 = no limit. Written as bytes or "512MiB", "2GiB", "1.5GB".
  int64_t memory_limit = 0;
};

// Checkpoints (safetensors + manifest), saved by the chief.
struct CheckpointSpec {
  std::string path = "checkpoint";
  std::string dir;          // "" = <output.dir>/checkpoints (no checkpoints without either)
  int64_t every_steps = 0;  // save after every N training steps (0 = not by steps)
  int64_t every_epochs = 0; // save after every N epochs (0 = not by epochs)
  int64_t keep = 3;         // newest complete checkpoints kept
  bool resume = false;      // checkpoint.resume "auto": continue from the newest good checkpoint ("never": false)
  // Keras' ModelCheckpoint(save_best_only=True): the epoch saves happen only when
  // `monitor` improved on the best saved so far.
  bool save_best_only = false;
  MonitorSpec monitor;
};

struct OutputSpec {
  std::string path = "output";
  std::string dir;  // "" = no files written
  bool tensorboard = true;  // the chief writes TensorBoard event files under dir/tensorboard
  bool trace = false;       // each task records a trace timeline (dir/trace.json)
  // An earlier run's results in dir (metrics.jsonl, checkpoints) may be replaced
  // (`--overwrite`); false: a run that does not resume is refused there.
  bool overwrite = false;
};

// A job file parsed, with the --set overrides applied. root() is its top-level
// object for the job reader (lib/job), which declares the top-level keys, reads
// each section and finishes it.
class JobDocument {
 public:
  // ConfigError for malformed JSON (with line:column), a non-object, a bad --set.
  JobDocument(const std::string& text, const std::string& source, const std::vector<std::string>& overrides);
  ~JobDocument();
  JobDocument(const JobDocument&) = delete;
  JobDocument& operator=(const JobDocument&) = delete;

  const std::string& source() const;
  Section& root();
  // The config after overrides, with sorted keys and no whitespace: the same job
  // gives the same text (for hashes and the run summary).
  std::string normalized_json() const;
  // normalized_json without what may differ between the tasks of one job (`task`,
  // `device`, `runtime.threads`, `runtime.secret_file`, `runtime.memory_limit`,
  // `checkpoint.resume`): the tasks compare its hash before training.
  std::string agreement_json() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The job file's text; IoError when it cannot be read.
std::string read_job_text(const std::string& file);

// "auto", "cpu", "gpu", "cuda" or one of the last three with ":N"; ConfigError
// with the valid forms otherwise.
std::string read_device(const Value& value);
TrainSpec read_train(const Value& value);
RuntimeSpec read_runtime(const Value& value);
// A size in bytes: digits ("2147483648"), or a number and a unit ("512MiB", "2GiB",
// "1.5GB", "300000KB", "64 B"): IEC KiB/MiB/GiB/TiB = 1024^k, SI kB/KB/MB/GB/TB =
// 1000^k (units in any case). Fractions round down to whole bytes. nullopt for
// anything else, a negative size or one past 2^63 bytes.
std::optional<int64_t> parse_byte_size(const std::string& text);
// The forms parse_byte_size accepts, for messages.
inline constexpr const char* kByteSizeForms =
    "a number of bytes (an integer >= 0) or a string with a unit such as \"512MiB\", \"2GiB\", \"1.5GB\" or "
    "\"300000KB\" (KiB/MiB/GiB/TiB = 1024^k bytes, kB/MB/GB/TB = 1000^k, B)";
OutputSpec read_output(const Value& value);
CheckpointSpec read_checkpoint(const Value& value);
// The top level's `cluster`, `task` and `rpc_layer` keys (TF_CONFIG's shape).
void read_cluster_keys(Section& root, ClusterSpec* cluster, std::optional<TaskId>* task);

}  // namespace dtrain::config
