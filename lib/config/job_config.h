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

namespace dtrain::config {

// One entry of model.layers. A flat struct: each layer type reads the fields it
// knows; job_config.cpp rejects keys that do not belong to the type.
struct LayerSpec {
  std::string path;      // "model.layers[3]"
  std::string type;      // Dense, Conv2D, MaxPooling2D, AveragePooling2D,
                         // GlobalAveragePooling2D, Flatten, Dropout,
                         // BatchNormalization, Activation, Residual
  std::string name;      // Keras-style name; "" = auto (dense, dense_1, ...)
  std::string activation = "linear";  // relu, sigmoid, tanh, softmax, linear
  bool use_bias = true;
  int64_t units = 0;                  // Dense
  int64_t filters = 0;                // Conv2D
  int64_t kernel_size[2] = {0, 0};    // Conv2D (int or [h, w] in JSON)
  int64_t strides[2] = {1, 1};        // Conv2D, pooling (pooling default: pool_size)
  std::string padding = "valid";      // valid | same
  int64_t pool_size[2] = {2, 2};      // pooling
  double rate = 0.0;                  // Dropout, in [0, 1)
  double momentum = 0.99;             // BatchNormalization
  double epsilon = 1e-3;              // BatchNormalization
  bool center = true;                 // BatchNormalization
  bool scale = true;                  // BatchNormalization
  // Residual: y = activation(layers(x) + shortcut(x)); an empty shortcut is the identity.
  std::vector<LayerSpec> layers, shortcut;
};

struct ModelSpec {
  std::string path = "model";
  std::vector<int64_t> input_shape;  // e.g. [28, 28, 1] or [784]
  std::vector<LayerSpec> layers;
};

struct LossSpec {
  std::string path = "loss";
  std::string type = "sparse_categorical_crossentropy";  // | categorical_crossentropy | mse
  bool from_logits = false;
};

// A learning rate: a constant, or a schedule with optional linear warmup.
struct LearningRateSpec {
  std::string path = "optimizer.learning_rate";
  std::string type = "constant";     // constant | step | cosine
  double initial_learning_rate = 0.001;
  int64_t decay_steps = 0;           // step, cosine (> 0 for them)
  double decay_rate = 0.1;           // step: lr * decay_rate^floor(step / decay_steps)
  double alpha = 0.0;                // cosine: final lr = initial * alpha
  int64_t warmup_steps = 0;          // linear warmup from 0 to the initial rate
};

struct OptimizerSpec {
  std::string path = "optimizer";
  std::string type = "adam";  // sgd | adam | adamw
  LearningRateSpec learning_rate;
  double momentum = 0.0;      // sgd
  bool nesterov = false;      // sgd
  double beta_1 = 0.9;        // adam, adamw
  double beta_2 = 0.999;      // adam, adamw
  double epsilon = 1e-7;      // adam, adamw
  double weight_decay = 0.004;  // adamw (Keras' default)
};

// One data source (data.train or data.test).
struct DataSourceSpec {
  std::string path;               // "data.train"
  std::string format;             // idx | cifar10 | synthetic
  std::string images;             // idx: images file (.gz or plain)
  std::string labels;             // idx: labels file
  std::vector<std::string> files; // cifar10: binary batch files
  std::vector<int64_t> shape;     // synthetic: sample shape, e.g. [28, 28, 1]
  int64_t classes = 10;           // synthetic: number of classes
  int64_t count = 0;              // synthetic: number of samples
  uint64_t seed = 0;              // synthetic: generator seed
  double rescale = 1.0 / 255.0;   // idx, cifar10: pixel value multiplier
  int64_t take = 0;               // use only the first N samples (0 = all)
};

struct DataSpec {
  std::string path = "data";
  DataSourceSpec train;
  bool has_test = false;
  DataSourceSpec test;
  int64_t shuffle_buffer = 10000;  // 0 or 1 = no shuffle
  int64_t prefetch = 2;            // batches prepared ahead on a background thread (0 = none)
  bool drop_remainder = false;     // drop the last, smaller training batch
  bool cache = true;               // keep decoded float samples in memory after the first epoch
  std::string shard_policy = "auto";  // auto | data | file | off (TF's AutoShardPolicy)
};

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

struct StrategySpec {
  std::string path = "strategy";
  std::string type = "one_device";  // one_device | mirrored | multi_worker_mirrored
  // mirrored: the replicas in this process, from `devices` (["cpu:0", "cpu:1"], like
  // TF's logical devices) or `replicas` (N); 1 for the other strategies.
  std::vector<std::string> devices;
  int64_t replicas = 1;
  std::string communication = "auto";  // auto | ring | nccl (TF's CommunicationOptions)
  int64_t bytes_per_pack = 25 << 20;   // gradient bucket size (PyTorch DDP's 25 MiB); 0 = auto
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
  // The config after overrides, serialised with sorted keys and no whitespace:
  // the same job gives the same text (for hashes and the run summary).
  std::string normalized_json;
  // normalized_json without what may differ between the tasks of one job (`task`,
  // `device`, `runtime.threads`, `runtime.secret_file`): the tasks compare its hash before training.
  std::string agreement_json;
};

// Resolves this process's cluster and task by TF's rules: the cluster from the
// job file or TF_CONFIG (`tf_config`: the variable's value, or nullptr when unset;
// both given and different is an error showing both), the task from `task_flag`
// ("worker:1", "" = none), else TF_CONFIG's task, else the file's. Checks the spec:
// known task types only (suggesting the closest), at most one chief and one
// evaluator, host:port addresses, no duplicates, the task within its list.
// Throws ConfigError naming the JSON path (in TF_CONFIG or the file) and a fix.
ClusterConfig resolve_cluster(const JobConfig& job, const char* tf_config, const std::string& task_flag);

// Reads, overrides and checks a job file. Throws ConfigError (with the file's line
// and column for malformed JSON, the JSON path for everything else) or IoError if
// the file cannot be read. `overrides` are "key.path=value" strings from --set.
JobConfig load_job_config(const std::string& file, const std::vector<std::string>& overrides = {});

// The same from text already in memory; `source` names it in messages.
JobConfig parse_job_config(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides = {});

}  // namespace dtrain::config
