// JobConfig: the typed form of a job's JSON file (Keras' names for model keys).
//
// This header is free of nlohmann/json on purpose: every module can include it
// cheaply. Parsing, defaults, range checks and error messages live in
// job_config.cpp (the only JSON user besides apps/). Each spec remembers the JSON
// path it came from (`path`), so later stages (model building, data loading) can
// name it in their errors, e.g. "model.layers[3].units".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "config/data_spec.h"
#include "config/model_spec.h"
#include "config/optimizer_spec.h"
#include "config/strategy_spec.h"

namespace dtrain::config {

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
};

struct RuntimeSpec {
  std::string path = "runtime";
  int64_t threads = 0;               // 0 = OMP_NUM_THREADS when set, else all cores
  double rendezvous_timeout = 300.0; // seconds a task waits for the others to join
  double heartbeat_interval = 1.0;   // seconds between heartbeats on the control channel
  double heartbeat_timeout = 10.0;   // seconds of silence after which a task is declared lost
  std::string secret_file;           // file holding the job secret (else DTRAIN_JOB_SECRET)
  std::string job_id;                // names the job in the handshake ("" = derived from the config)
};

// Checkpoints (safetensors + manifest), saved by the chief.
struct CheckpointSpec {
  std::string path = "checkpoint";
  std::string dir;          // "" = <output.dir>/checkpoints (no checkpoints without either)
  int64_t every_steps = 0;  // save after every N training steps (0 = not by steps)
  int64_t every_epochs = 0; // save after every N epochs (0 = not by epochs)
  int64_t keep = 3;         // newest complete checkpoints kept
  std::string resume = "never";  // never | auto (resume from the newest good checkpoint if any)
};

struct OutputSpec {
  std::string path = "output";
  std::string dir;  // "" = no files written
};

struct JobConfig {
  std::string source;  // file name, or "<string>"
  // Where to train: "auto" (the GPU when one is usable, else the CPU), "cpu",
  // "gpu" (= "cuda:0") or "cuda:N".
  std::string device = "auto";
  StrategySpec strategy;
  ModelSpec model;
  LossSpec loss;
  OptimizerSpec optimizer;
  DataSpec data;
  TrainSpec train;
  RuntimeSpec runtime;
  OutputSpec output;
  CheckpointSpec checkpoint;
  // The file's `cluster` and `task` keys (TF_CONFIG's shape); empty / unset when absent.
  ClusterSpec cluster;
  std::optional<TaskId> task;
  FileCluster file_cluster() const { return {source, cluster, task}; }
  // The config after overrides, serialised with sorted keys and no whitespace:
  // the same job gives the same text (for hashes and the run summary).
  std::string normalized_json;
  // normalized_json without what may differ between the tasks of one job (`task`,
  // `device`, `runtime.threads`, `runtime.secret_file`): the tasks compare its hash before training.
  std::string agreement_json;
};

// resolve_cluster() (cluster_spec.h) with the job file's cluster and task.
ClusterConfig resolve_cluster(const JobConfig& job, const char* tf_config, const std::string& task_flag);

// The strategy.type names the parser accepts, and those it lets through (the
// others are "not available yet"). The strategy registry (strategy/registry.h)
// must have an entry for each; a unit test checks that the two agree.
const std::vector<std::string>& strategy_type_names();
const std::vector<std::string>& available_strategy_type_names();

// Reads, overrides and checks a job file. Throws ConfigError (with the file's line
// and column for malformed JSON, the JSON path for everything else) or IoError if
// the file cannot be read. `overrides` are "key.path=value" strings from --set.
JobConfig load_job_config(const std::string& file, const std::vector<std::string>& overrides = {});

// The same from text already in memory; `source` names it in messages.
JobConfig parse_job_config(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides = {});

}  // namespace dtrain::config
