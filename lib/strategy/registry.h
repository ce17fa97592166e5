// The strategy registry: every value of strategy.type, what it needs from the
// cluster runtime, and how to build it. The trainer and the runtime look a
// strategy up here by name and never compare strategy names themselves.
//
// Adding a strategy: a class behind the Strategy interface (strategy.h) in its own
// file or folder, and one line in registry.cpp's table.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "strategy/strategy_spec.h"

namespace dtrain::strategy {

// The registry's facts need no strategy's code: its factories name these only.
class Strategy;
struct StrategyContext;

// What a strategy needs between the tasks of a job.
enum class CrossTask {
  kNothing,    // trains in one task (one_device, mirrored); several tasks are an error
  kAllReduce,  // a communicator over the training tasks (chief + workers)
  kParameterServer,  // variables on ps tasks, a coordinator handing out work to workers
};

struct StrategyEntry {
  std::string name;         // the strategy.type value, TF's name
  std::string description;  // one line, for the README's table
  CrossTask cross_task = CrossTask::kNothing;
  bool local_replicas = false;  // takes strategy.replicas / strategy.devices
  // Builds it; nullptr for a name that is recognised (TF has it) but not built yet.
  std::function<std::unique_ptr<Strategy>(const StrategyJob&, const StrategyContext&)> make;
  // Sends activations between tasks (pipeline): its communicator over the training
  // tasks is Gloo's own (point-to-point and sub-groups), whatever communication says.
  bool point_to_point = false;
  // Keeps one more copy of the variables, their gradients and slots: the central
  // one (central_storage), for the memory estimate.
  bool central_copy = false;
  // Puts one replica on each of several GPUs (mirrored, TF's MirroredStrategy);
  // the others keep one GPU per process.
  bool gpu_per_replica = false;
  // Can scale the loss (mixed_float16): its replicas agree on skipping a step.
  // Not where updates happen away from the replicas' decision (central_storage,
  // parameter_server).
  bool scales_loss = true;
  // Trains in one task: the strategy `dtrain launch --workers N` (N >= 2) runs
  // instead, across the tasks, as TF's MirroredStrategy becomes
  // MultiWorkerMirroredStrategy ("" : none, the job is refused as it is).
  std::string across_tasks = {};
  bool elastic = false;        // strategy.elastic: its group re-forms over the tasks left
  bool shards_state = false;   // strategy.shard / shard_optimizer_state (ZeRO-1/2/3)
  bool splits_layers = false;  // strategy.tensor_parallel
  bool available() const { return static_cast<bool>(make); }
};

// The keys of the strategy section, for the README's table.
const std::vector<config::KeyDoc>& strategy_keys();

// Checks that the cluster's task types make sense for the strategy: several
// training tasks need a cross-task strategy (else they would train independent
// models), ps tasks need parameter_server (else they would idle). ConfigError
// saying what to change otherwise. `source` names where the cluster came from.
void check_cluster_roles(const StrategySpec& strategy, const config::ClusterSpec& cluster, const std::string& source);
// strategy.elastic against a cluster of `training_tasks` (chief and workers):
// ConfigError when the count is outside [min_workers, max_workers].
void check_elastic_cluster(const ElasticSpec& elastic, int training_tasks, const std::string& source);
// strategy.elastic batch "global": how `tasks` tasks take the global batch of
// `start_tasks` tasks x `accumulation` micro-batches of `batch` samples. When
// the micro-batches split evenly, each task takes start_tasks x accumulation /
// tasks of them, of `batch` samples (as before); otherwise every task takes the
// fewest micro-batches of at most `batch` samples that split the global batch
// into equal micro-steps, and a micro-step's samples are dealt out as evenly
// as they go (4 x 64 over 3 tasks: 2 micro-batches of 43, 43 and 42 samples).
// The gradients are weighted by samples, so the update is the global batch's.
struct ElasticSplit {
  int64_t accumulation = 1;          // micro-batches each task takes per step
  std::vector<int64_t> micro_batch;  // by member rank: the samples of each of its micro-batches
  int64_t global_batch = 0;          // samples per step across the group (always the start's)
  bool even() const;                 // every member's micro-batch the same
  int64_t micro_step() const;        // samples of one micro-batch across the group
  // "2 micro-batches of 43, 43, 42 samples" / "4 micro-batches of 8 samples"
  std::string describe() const;
};
// ConfigError when no split exists (fewer samples in a micro-step than tasks).
ElasticSplit elastic_split(int64_t accumulation, int64_t batch, int start_tasks, int tasks);
// ConfigError unless every task count from min_workers to `start_tasks` has a split.
void check_elastic_batch(const ElasticSpec& elastic, int64_t accumulation, int64_t batch, int start_tasks,
                         const std::string& source);

// Every strategy, in the README's order.
const std::vector<StrategyEntry>& strategies();
// The names of the strategies that are built (available()).
std::vector<std::string> available_strategy_names();
// The entry named `name`; ConfigError naming strategy.type and the valid names otherwise.
const StrategyEntry& find_strategy(const std::string& name);
// strategy.communication's value named `name` ("auto", "ring", "hierarchical",
// "nccl"); ConfigError for any other name.
Communication communication_by_name(const std::string& name);
// strategy.communication nccl reduces device buffers: ConfigError ("<source>:
// strategy.communication: ...; <fix>") unless the job computes on a GPU
// (`on_gpu`); `device` says what its device is ("cpu", "auto, the CPU here: ...").
void check_communication_device(const StrategySpec& strategy, bool on_gpu, const std::string& device,
                                const std::string& source);

}  // namespace dtrain::strategy
