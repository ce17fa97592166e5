// JobConfig: the typed form of a job's JSON file, put together from the sections
// each module reads through its own registry: nn (model, loss), optim (optimizer),
// data (data), strategy (strategy), and config itself (device, train, runtime,
// output, checkpoint, cluster, task). Each spec keeps the JSON path it came from.
//
// job/reference.h writes the reference tables of docs/config-reference.md from the same registries.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "config/job_file.h"
#include "data/data_spec.h"
#include "nn/model_spec.h"
#include "optim/optimizer_spec.h"
#include "strategy/strategy.h"
#include "strategy/strategy_spec.h"

namespace dtrain::job {

struct JobConfig {
  std::string source;  // file name, or "<string>"
  // Where to train: "auto" (the GPU when one is usable, else the CPU), "cpu",
  // "gpu" (= "cuda:0") or "cuda:N".
  std::string device = "auto";
  strategy::StrategySpec strategy;
  nn::ModelSpec model;
  nn::LossSpec loss;
  optim::OptimizerSpec optimizer;
  data::DataSpec data;
  config::TrainSpec train;
  config::RuntimeSpec runtime;
  config::OutputSpec output;
  config::CheckpointSpec checkpoint;
  // The file's `cluster` and `task` keys (TF_CONFIG's shape); empty / unset when absent.
  config::ClusterSpec cluster;
  std::optional<config::TaskId> task;
  // The config after overrides, serialised with sorted keys and no whitespace:
  // the same job gives the same text (for hashes and the run summary).
  std::string normalized_json;
  // normalized_json without what may differ between the tasks of one job (`task`,
  // `device`, `runtime.threads`, `runtime.secret_file`, `runtime.memory_limit`,
  // `checkpoint.resume`): the tasks compare its hash before training.
  std::string agreement_json;
  // What is allowed but likely not meant (a softmax output layer with a loss
  // from_logits), one line each naming the file and the keys; the commands that
  // load a job print them once, as "dtrain: warning: ...".
  std::vector<std::string> warnings;

  config::FileCluster file_cluster() const { return {source, cluster, task}; }
  // What the strategy is built from (views into this job).
  strategy::StrategyJob strategy_job() const { return {strategy, model, loss, optimizer, train}; }
  // Whether the job survives the loss of a worker, and a lost worker started
  // again alone rejoins it (parameter_server, as TF promises; strategy.elastic,
  // whose others re-form without it, and again with it).
  bool survives_lost_workers() const;
};

// Reads, overrides and checks a job file. Throws ConfigError (with the file's line
// and column for malformed JSON, the JSON path for everything else) or IoError if
// the file cannot be read. `overrides` are "key.path=value" strings from --set.
JobConfig load_job_config(const std::string& file, const std::vector<std::string>& overrides = {});

// The same from text already in memory; `source` names it in messages.
JobConfig parse_job_config(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides = {});

}  // namespace dtrain::job
