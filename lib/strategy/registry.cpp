// The table of strategies (registry.h): one line each.
#include "strategy/registry.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "comm/nccl/nccl_support.h"
#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "strategy/data_parallel.h"
#include "strategy/parameter_server.h"
#include "strategy/pipeline.h"

namespace dtrain::strategy {
namespace {

std::unique_ptr<Strategy> data_parallel(const StrategyJob& job, const StrategyContext& context) {
  return std::make_unique<DataParallelStrategy>(job, context);
}

std::unique_ptr<Strategy> parameter_server(const StrategyJob& job, const StrategyContext& context) {
  return std::make_unique<ParameterServerStrategy>(job, context);
}

std::unique_ptr<Strategy> pipeline(const StrategyJob& job, const StrategyContext& context) {
  return std::make_unique<PipelineStrategy>(job, context);
}

}  // namespace

const std::vector<StrategyEntry>& strategies() {
  static const std::vector<StrategyEntry> table = {
      {.name = "one_device",
       .description = "one replica on one device",
       .cross_task = CrossTask::kNothing,
       .make = data_parallel,
       .across_tasks = "multi_worker_mirrored"},
      {.name = "mirrored",
       .description = "N replicas on threads of one process, gradients averaged in shared memory",
       .cross_task = CrossTask::kNothing,
       .local_replicas = true,
       .make = data_parallel,
       .gpu_per_replica = true,
       .across_tasks = "multi_worker_mirrored"},
      {.name = "multi_worker_mirrored",
       .description = "one replica per training task (or `replicas` per task, reduced in the process first), "
                      "gradients averaged with a bucketed all-reduce",
       .cross_task = CrossTask::kAllReduce,
       .local_replicas = true,
       .make = data_parallel,
       .elastic = true,
       .shards_state = true,
       .splits_layers = true},
      {.name = "central_storage",
       .description = "N replicas on threads of one process read one central copy of the variables on the host; "
                      "their mean gradient updates it once per step",
       .cross_task = CrossTask::kNothing,
       .local_replicas = true,
       .make = data_parallel,  // (its gradient path is the central copy: gradient_path.h)
       .central_copy = true,
       .scales_loss = false},
      {.name = "parameter_server",
       .description = "variables (and the optimizer) on ps tasks; workers pull values, push gradients and take "
                      "work units from the coordinator",
       .cross_task = CrossTask::kParameterServer,
       .make = parameter_server,
       .scales_loss = false},
      {.name = "pipeline",
       .description = "the model's layers cut into stages, one per training task; micro-batches flow through them "
                      "(1F1B or GPipe), `data_parallel` copies of the pipeline all-reduce each stage's gradients",
       .cross_task = CrossTask::kAllReduce,
       .make = pipeline,
       .point_to_point = true,
       .splits_layers = true},
  };
  return table;
}

const std::vector<config::KeyDoc>& strategy_keys() {
  static const std::vector<config::KeyDoc> keys = {
      {"type", "`one_device` (default), `mirrored`, `multi_worker_mirrored`, `central_storage`, `parameter_server`, `pipeline`"},
      {"replicas", "mirrored, central_storage, multi_worker_mirrored: N replicas in this process (1); mirrored on "
                   "GPUs: one per GPU, from the job's GPU on (`device` `auto` picks the GPUs when there is one for "
                   "every replica)"},
      {"devices", "mirrored, central_storage, multi_worker_mirrored: the replicas as device names, e.g. "
                  "`[\"cpu:0\", \"cpu:1\"]` (TF's logical devices); mirrored: `[\"gpu:0\", \"gpu:1\"]`, one "
                  "replica on each GPU named"},
      {"communication", "`auto` (hierarchical when several tasks share a machine, on one machine too, where it is "
                        "shared memory alone; else Gloo's own choice, today its ring), `ring` (Gloo's ring by name) or "
                        "`hierarchical` (each machine's tasks reduce through shared memory, one leader per machine "
                        "all-reduces over Gloo) or `nccl` (NCCL between the tasks' GPUs, on device buffers: builds with "
                        "CUDA and NCCL, jobs whose `device` is a GPU; exit 2 otherwise). For a GPU job `auto` means "
                        "NCCL in such builds: the gradient buckets are all-reduced on the GPU, with no host copy; the "
                        "other collectives stay on Gloo. A pipeline on GPUs: `auto` and `nccl` send the stages' activations with "
                        "NCCL where every stage has a GPU of its own, `ring` through Gloo with host copies. mirrored on "
                        "several GPUs: `auto` and `nccl` all-reduce in a local NCCL group, `ring` in shared memory "
                        "through host copies. None of it has run on a GPU yet"},
      {"allreduce_dtype", "`float32` (default) or `bfloat16`: the type gradients travel in between tasks "
                          "(bfloat16 halves the bytes; sums are accumulated in float32 where the backend allows)"},
      {"bytes_per_pack", "gradient bucket size in bytes (25 MiB, PyTorch DDP's); 0 = auto"},
      {"mode", "parameter_server: `async` (default, TF's: every push applied as it arrives), `sync` (one push per "
               "worker per step, averaged: multi_worker_mirrored's trajectory) or `stale` (bounded staleness)"},
      {"max_staleness", "parameter_server, mode stale: no worker runs more than K steps ahead of the slowest (0)"},
      {"variable_partitioner",
       "parameter_server: `{\"type\": \"min_size\", \"min_shard_bytes\": 262144, \"max_shards\": N}`, "
       "`{\"type\": \"max_size\", \"max_shard_bytes\": B}` or `{\"type\": \"fixed\", \"num_shards\": N}` "
       "(TF's partitioners, along the first axis); absent: whole variables"},
      {"steps_per_work_unit", "parameter_server: batches per work unit the coordinator hands out (20)"},
      {"shard_optimizer_state",
       "multi_worker_mirrored: `true` shards the optimizer state (ZeRO stage 1): gradients are reduce-scattered, "
       "each task updates its 1/N slice of the parameters with its slice of the optimizer slots, and the "
       "parameters are all-gathered (false)"},
      {"shard",
       "multi_worker_mirrored: what each of the N tasks keeps only 1/N of: `\"none\"` (default), "
       "`\"optimizer_state\"` (ZeRO stage 1, the same as shard_optimizer_state), `\"gradients\"` (ZeRO-2: the "
       "gradients are reduce-scattered layer by layer as backward produces them, each task keeping its slice) or "
       "`\"parameters\"` (ZeRO-3, PyTorch FSDP: each layer's parameters are all-gathered just before its forward and "
       "backward and freed after). gradients and parameters: float32 on the CPU, one replica per task"},
      {"prefetch", "multi_worker_mirrored with shard \"parameters\": the next layer's all-gather starts while this "
                   "one computes (FSDP's forward and backward prefetch; true)"},
      {"min_unit_params", "multi_worker_mirrored with shard \"gradients\" or \"parameters\": consecutive layers are "
                          "gathered and reduce-scattered as one unit until it holds at least this many trainable "
                          "parameters (FSDP's size_based_auto_wrap_policy min_num_params): fewer, larger collectives "
                          "for small layers, more memory in flight (0: each layer with parameters its own unit)"},
      {"tensor_parallel",
       "multi_worker_mirrored: each T consecutive tasks hold one copy of the model between them (Megatron's "
       "tensor parallelism): each pair of consecutive Dense layers splits, the first by output columns, the second "
       "by input rows, and MultiHeadAttention (in TransformerDecoder too) by heads (one all-reduce forward, one "
       "backward); other layers are whole on every task; a copy's tasks read the same batches, and the N / T "
       "copies are data parallel. T must divide the training tasks; float32 on the CPU, one replica per task "
       "(1: off). pipeline: each stage's layers split so over T neighbouring tasks (stages x "
       "data_parallel x T tasks; a Dense pair cut by a stage boundary stays whole)"},
      {"tensor_split",
       "multi_worker_mirrored or pipeline with tensor_parallel: `{\"<layer>\": \"none\"}` keeps a layer whole that the plan "
       "would split (`\"auto\"`: the plan's choice). A Dense pair is kept whole if either of its layers is (the "
       "pairing goes on from the next layer); inside a TransformerDecoder the names are `<block>/self_attention`, "
       "`<block>/feedforward_intermediate_dense` and `<block>/feedforward_output_dense`, or the block's own name for "
       "all of it. `dtrain validate` prints the split"},
      {"stages", "pipeline: the layer names where each stage after the first begins (`[\"conv2d_1\", \"dense\"]`: "
                 "three stages), or `\"auto\"`: balanced by per-layer time measured on warm-up steps; one stage per "
                 "training task of each pipeline copy (T tasks with tensor_parallel), in task order"},
      {"micro_batches", "pipeline: micro-batches each replica's batch is cut into (4); gradients are summed over "
                        "them and applied once per step"},
      {"schedule", "pipeline: `1f1b` (default: one forward, one backward) or `gpipe` (all forwards, then all "
                   "backwards)"},
      {"data_parallel", "pipeline: copies of the pipeline; tasks = stages x data_parallel (x tensor_parallel), the "
                        "tasks holding the same stage all-reduce its gradients. Not given: the rest of the training "
                        "tasks (tasks / (stages x tensor_parallel)) with named stages, 1 with \"auto\""},
      {"elastic", "multi_worker_mirrored: `{\"min_workers\": M, \"max_workers\": N, \"settle_seconds\": 30, "
                  "\"batch\": \"global\"}`: a lost worker is survived without a restart: the others agree on who is "
                  "left, connect again and go on from the last step they completed, in memory; a task that comes (back) "
                  "joins at a step's end (after the job's last step it is told the training ended, exit 0); below M training tasks (chief and workers) the job saves a checkpoint and "
                  "stops (exit 4). The job starts when every task joined, or once M did and `settle_seconds` passed "
                  "(torchrun's last call): the others join when they come. `batch` `global` keeps the global batch: the remaining "
                  "tasks take more accumulation steps (train.gradient_accumulation_steps x tasks / remaining tasks "
                  "must be whole for every size from M up). The chief cannot be lost (it holds the job's store)"}};
  return keys;
}

std::vector<std::string> available_strategy_names() {
  std::vector<std::string> names;
  for (const StrategyEntry& e : strategies())
    if (e.available()) names.push_back(e.name);
  return names;
}

const StrategyEntry& entry_of(const StrategySpec& spec) { return spec.type ? *spec.type : strategies().front(); }

const char* shard_mode_name(ShardMode mode) {
  switch (mode) {
    case ShardMode::kNone: return "none";
    case ShardMode::kOptimizerState: return "optimizer_state";
    case ShardMode::kGradients: return "gradients";
    case ShardMode::kParameters: return "parameters";
  }
  return "none";
}

namespace {

ps::PartitionerSpec read_partitioner(const config::Value& value) {
  config::Section r(value, "the variable partitioner");
  ps::PartitionerSpec p;
  if (!r.has("type")) r.fail("type", "is required: \"min_size\", \"max_size\" or \"fixed\"");
  const std::string type = r.get_choice("type", "", {"min_size", "max_size", "fixed"}, "partitioner");
  if (type == "min_size") {
    r.expect_keys({"type", "min_shard_bytes", "max_shards"});
    p.type = ps::PartitionerSpec::Type::kMinSize;
    p.min_shard_bytes = r.get_int("min_shard_bytes", 256 << 10, 1);
    p.max_shards = r.get_int("max_shards", 1, 1);
  } else if (type == "max_size") {
    r.expect_keys({"type", "max_shard_bytes", "max_shards"});
    p.type = ps::PartitionerSpec::Type::kMaxSize;
    if (!r.has("max_shard_bytes")) r.fail("max_shard_bytes", "is required for the max_size partitioner");
    p.max_shard_bytes = r.get_int("max_shard_bytes", 0, 4);
    p.max_shards = r.get_int("max_shards", 0, 1);
  } else {
    r.expect_keys({"type", "num_shards"});
    p.type = ps::PartitionerSpec::Type::kFixed;
    if (!r.has("num_shards")) r.fail("num_shards", "is required for the fixed partitioner");
    p.num_shards = r.get_int("num_shards", 1, 1);
  }
  r.finish();
  return p;
}

// strategy.shard and strategy.prefetch (after shard_optimizer_state, which is
// the same as shard "optimizer_state").
void read_shard(config::Section& r, const StrategyEntry& entry, StrategySpec& strategy) {
  for (const char* key : {"shard", "prefetch", "min_unit_params"})
    if (r.has(key) && !entry.shards_state)
      r.fail(key, str("only multi_worker_mirrored shards its state over tasks; '", entry.name, "' does not"));
  const std::string shard = r.get_choice("shard", strategy.shard_optimizer_state ? "optimizer_state" : "none",
                                         {"none", "optimizer_state", "gradients", "parameters"}, "shard mode");
  for (ShardMode m : {ShardMode::kNone, ShardMode::kOptimizerState, ShardMode::kGradients, ShardMode::kParameters})
    if (shard == shard_mode_name(m)) strategy.shard = m;
  if (strategy.shard_optimizer_state && strategy.shard != ShardMode::kOptimizerState)
    r.fail("shard", str("is \"", shard, "\" and shard_optimizer_state is true (the same as shard "
                        "\"optimizer_state\"); keep one of them"));
  strategy.shard_optimizer_state = strategy.shard == ShardMode::kOptimizerState;
  strategy.prefetch = r.get_bool("prefetch", true);
  if (r.has("prefetch") && strategy.shard != ShardMode::kParameters)
    r.fail("prefetch", "applies only to \"shard\": \"parameters\" (the all-gathers it starts early)");
  strategy.min_unit_params = r.get_int("min_unit_params", 0, 0);
  if (r.has("min_unit_params") && strategy.shard != ShardMode::kGradients && strategy.shard != ShardMode::kParameters)
    r.fail("min_unit_params", "applies only to \"shard\": \"gradients\" or \"parameters\" (the units they gather "
                              "and reduce-scatter)");
}

ElasticSpec read_elastic(const config::Value& value, const StrategyEntry& entry, const StrategySpec& strategy) {
  config::Section r(value, "strategy.elastic");
  r.expect_keys({"min_workers", "max_workers", "settle_seconds", "batch"});
  ElasticSpec e;
  e.on = true;
  if (!entry.elastic)
    value.fail(str("only multi_worker_mirrored is elastic; '", entry.name, "' is not",
                   entry.cross_task == CrossTask::kParameterServer
                       ? " (parameter_server survives a lost worker by itself: its work units go to the others)"
                   : entry.point_to_point
                       ? " (its stages would have to be cut again over the survivors, which is not built)"
                       : ""));
  if (strategy.tensor_parallel > 1)
    value.fail("does not go with tensor_parallel: a lost task's part of the layers would be gone; set "
               "tensor_parallel to 1");
  if (strategy.shard != ShardMode::kNone)
    value.fail(str("does not go with shard \"", shard_mode_name(strategy.shard), "\": a lost task's slice of the "
                   "state would have to come from the last checkpoint, which is not built; drop `shard` and "
                   "shard_optimizer_state"));
  e.min_workers = r.get_int("min_workers", 1, 1);
  e.max_workers = r.get_int("max_workers", 0, 1);
  if (e.max_workers > 0 && e.max_workers < e.min_workers)
    r.fail("max_workers", str("is ", e.max_workers, ", below min_workers ", e.min_workers));
  e.settle_seconds = r.get_double("settle_seconds", 30.0, config::kSecondsOrZero);
  e.batch = r.get_choice("batch", "global", {"global"}, "elastic batch rule");
  r.finish();
  return e;
}

}  // namespace

StrategySpec read_strategy_spec(const config::Value& value) {
  StrategySpec strategy;
  strategy.path = value.path().empty() ? "strategy" : value.path();
  config::Section r(value, "the strategy section");
  r.expect_keys(config::key_names(strategy_keys()));
  const StrategyEntry& entry =
      find_strategy(r.get_choice("type", "one_device", config::entry_names(strategies()), "strategy type"));
  strategy.type = &entry;
  if (!entry.available())
    r.fail("type", str("'", entry.name, "' is not available in this version of dtrain; available: ",
                       join(available_strategy_names(), ", ")));
  const auto devices = r.find("devices");
  const bool has_replicas = r.has("replicas");
  if ((devices || has_replicas) && !entry.local_replicas)
    r.fail(devices ? "devices" : "replicas",
           str("only mirrored, central_storage and multi_worker_mirrored take several replicas in one process; '", entry.name,
               "' runs one replica per task"));
  if (devices && has_replicas) r.fail("replicas", "give either 'devices' or 'replicas', not both");
  if (devices) {
    strategy.devices = devices->to_string_list();
    for (size_t i = 0; i < strategy.devices.size(); ++i) {
      const std::string& d = strategy.devices[i];
      try {
        (void)Device::parse(d);
      } catch (const ConfigError&) {
        devices->at(i).fail(str("'", d, "' is not a device; use names like \"cpu:0\", \"cpu:1\", \"gpu:0\""));
      }
    }
    strategy.replicas = static_cast<int64_t>(strategy.devices.size());
  }
  strategy.replicas = r.get_int("replicas", strategy.replicas, 1);
  const std::string communication =
      r.get_choice("communication", "auto", {"auto", "ring", "hierarchical", "nccl"}, "communication implementation");
  if (communication == "nccl" && !comm::kNcclBuilt)
    r.fail("communication",
           "'nccl' needs a build of dtrain with NCCL, and this one has none (built without the CUDA backend or "
           "without libnccl); rebuild with -DDTRAIN_CUDA=ON where the CUDA toolkit and NCCL are, or use \"auto\" "
           "or \"ring\" (Gloo)");
  strategy.communication = communication_by_name(communication);
  if (r.get_choice("allreduce_dtype", "float32", {"float32", "bfloat16"}, "all-reduce dtype") == "bfloat16")
    strategy.allreduce_dtype = AllreduceDType::kBfloat16;
  strategy.bytes_per_pack = r.get_int("bytes_per_pack", strategy.bytes_per_pack, 0);
  const bool ps = entry.cross_task == CrossTask::kParameterServer;
  for (const char* key : {"mode", "max_staleness", "variable_partitioner", "steps_per_work_unit"})
    if (!ps && r.has(key)) r.fail(key, str("only parameter_server takes '", key, "'; '", entry.name, "' does not"));
  const std::string mode = r.get_choice("mode", "async", {"async", "sync", "stale"}, "update mode");
  strategy.mode = mode == "sync" ? ps::UpdateMode::kSync : mode == "stale" ? ps::UpdateMode::kStale : ps::UpdateMode::kAsync;
  strategy.max_staleness = r.get_int("max_staleness", 0, 0);
  if (r.has("max_staleness") && strategy.mode != ps::UpdateMode::kStale)
    r.fail("max_staleness", "applies only to \"mode\": \"stale\"");
  strategy.steps_per_unit = r.get_int("steps_per_work_unit", strategy.steps_per_unit, 1);
  if (const auto p = r.find("variable_partitioner")) strategy.partitioner = read_partitioner(*p);
  if (r.has("shard_optimizer_state") && !entry.shards_state)
    r.fail("shard_optimizer_state", str("only multi_worker_mirrored shards its optimizer state; '", entry.name,
                                        "' does not (a pipeline's stages already hold only their own layers' state)"));
  strategy.shard_optimizer_state = r.get_bool("shard_optimizer_state", false);
  read_shard(r, entry, strategy);
  if (r.has("tensor_parallel") && !entry.splits_layers)
    r.fail("tensor_parallel", str("only multi_worker_mirrored and pipeline split layers over tasks; '", entry.name,
                                  "' does not"));
  strategy.tensor_parallel = r.get_int("tensor_parallel", 1, 1);
  if (const auto split = r.find("tensor_split")) {
    if (strategy.tensor_parallel < 2)
      r.fail("tensor_split", "applies only with tensor_parallel of 2 or more (the layers it splits)");
    if (!split->is_object()) split->fail("is an object of layer names, each \"none\" or \"auto\"");
    for (const std::string& name : split->member_names())
      if (split->member(name).to_choice({"none", "auto"}, "tensor split") == "none") strategy.tensor_whole.insert(name);
  }
  if (strategy.tensor_parallel > 1 && strategy.shard != ShardMode::kNone)
    r.fail("tensor_parallel", str("does not go with shard \"", shard_mode_name(strategy.shard),
                                  "\" yet (ZeRO over a tensor-parallel model is not built); drop `shard` and "
                                  "shard_optimizer_state"));
  const bool pipeline = entry.point_to_point;
  for (const char* key : {"stages", "micro_batches", "schedule", "data_parallel"})
    if (!pipeline && r.has(key)) r.fail(key, str("only pipeline takes '", key, "'; '", entry.name, "' does not"));
  if (const auto stages = r.find("stages")) {
    if (stages->is_string()) {
      if (stages->to_string() != "auto")
        stages->fail("is a list of layer names where stages begin, or \"auto\"");
      strategy.stages_auto = true;
    } else {
      strategy.stages = stages->to_string_list();
      if (strategy.stages.empty())
        stages->fail("is empty: list the layer names where the stages after the first begin, e.g. [\"dense_1\"]");
    }
  } else if (pipeline) {
    r.fail("stages", "is required for pipeline: the layer names where each stage after the first begins, or \"auto\"");
  }
  strategy.micro_batches = r.get_int("micro_batches", strategy.micro_batches, 1);
  strategy.schedule = r.get_choice("schedule", "1f1b", {"1f1b", "gpipe"}, "pipeline schedule") == "gpipe"
                          ? PipelineSchedule::kGpipe
                          : PipelineSchedule::k1F1B;
  strategy.data_parallel = r.get_int("data_parallel", 0, 1);  // (0: not given, the rest of the tasks)
  if (const auto elastic = r.find("elastic")) strategy.elastic = read_elastic(*elastic, entry, strategy);
  r.finish();
  return strategy;
}

void check_cluster_roles(const StrategySpec& strategy, const config::ClusterSpec& cluster, const std::string& source) {
  if (cluster.empty()) return;
  const StrategyEntry& entry = entry_of(strategy);
  const int training = cluster.world_size();
  if (strategy.elastic.on) check_elastic_cluster(strategy.elastic, training, source);
  const int ps = cluster.count(config::TaskType::kPs);
  const std::string where = str(strategy.path, ".type '", entry.name, "': ");
  if (entry.cross_task == CrossTask::kNothing && training > 1)
    throw ConfigError(str(where, "the cluster (", source, ") has ", training,
                          " training tasks (chief and workers), but this strategy trains in one task: they would "
                          "train independent models; set strategy.type to multi_worker_mirrored or parameter_server, "
                          "or run one task"));
  if (entry.cross_task != CrossTask::kParameterServer && ps > 0)
    throw ConfigError(str(where, "the cluster (", source, ") has ", ps,
                          " ps task(s), but this strategy keeps no variables on ps tasks: they would idle; remove "
                          "cluster.ps or set strategy.type to parameter_server"));
  if (entry.cross_task == CrossTask::kParameterServer) {
    if (ps == 0)
      throw ConfigError(str(where, "the cluster (", source,
                            ") has no ps task to hold the variables; add cluster.ps (`dtrain launch --ps 1`)"));
    if (cluster.count(config::TaskType::kWorker) - (cluster.count(config::TaskType::kChief) == 0 ? 1 : 0) < 1)
      throw ConfigError(str(where, "the cluster (", source,
                            ") has no worker besides the coordinator (the chief, or worker:0 without one) to "
                            "compute; add a worker"));
  }
}

void check_elastic_cluster(const ElasticSpec& elastic, int training_tasks, const std::string& source) {
  if (training_tasks < elastic.min_workers)
    throw ConfigError(str("strategy.elastic.min_workers: ", elastic.min_workers, " training tasks, but the cluster (",
                          source, ") has ", training_tasks, " (chief and workers); lower min_workers or add workers"));
  if (elastic.max_workers > 0 && training_tasks > elastic.max_workers)
    throw ConfigError(str("strategy.elastic.max_workers: ", elastic.max_workers, " training tasks, but the cluster (",
                          source, ") has ", training_tasks, "; raise max_workers or run fewer workers"));
}

bool ElasticSplit::even() const {
  return std::adjacent_find(micro_batch.begin(), micro_batch.end(), std::not_equal_to<>()) == micro_batch.end();
}

int64_t ElasticSplit::micro_step() const { return std::accumulate(micro_batch.begin(), micro_batch.end(), int64_t{0}); }

std::string ElasticSplit::describe() const {
  std::string sizes;
  for (size_t i = 0; i < micro_batch.size() && !(even() && i > 0); ++i)
    sizes += str(i == 0 ? "" : ", ", micro_batch[i]);
  return str(accumulation, " micro-batch", accumulation == 1 ? "" : "es", " of ", sizes, " samples");
}

ElasticSplit elastic_split(int64_t accumulation, int64_t batch, int start_tasks, int tasks) {
  DT_CHECK(accumulation >= 1 && batch >= 1 && start_tasks >= 1 && tasks >= 1, "elastic split of ", accumulation,
           " x ", batch, " x ", start_tasks, " over ", tasks);
  const int64_t micro_batches = accumulation * start_tasks;  // of `batch` samples, in one update
  ElasticSplit split;
  split.global_batch = micro_batches * batch;
  // The fewest micro-batches per task, of at most `batch` samples each, whose
  // micro-steps (one micro-batch of every task) are equal: k divides the global batch.
  int64_t k = (micro_batches + tasks - 1) / tasks;
  while (split.global_batch % k != 0) ++k;  // (ends: k = micro_batches divides it)
  const int64_t step = split.global_batch / k;
  if (step < tasks)
    throw ConfigError(str("strategy.elastic.batch 'global': the global batch of ", split.global_batch,
                          " samples cannot give each of ", tasks, " tasks a sample in each of ", k,
                          " micro-batches; raise train.batch_size_per_replica or strategy.elastic.min_workers"));
  split.accumulation = k;
  for (int64_t i = 0; i < tasks; ++i) split.micro_batch.push_back(step / tasks + (i < step % tasks ? 1 : 0));
  return split;
}

void check_elastic_batch(const ElasticSpec& elastic, int64_t accumulation, int64_t batch, int start_tasks,
                         const std::string& source) {
  for (int64_t n = std::max<int64_t>(1, elastic.min_workers); n < start_tasks; ++n) {
    try {
      elastic_split(accumulation, batch, start_tasks, static_cast<int>(n));
    } catch (const ConfigError& e) {
      throw ConfigError(str(source, ": ", e.what(), " (", n, " of the ", start_tasks, " tasks left)"));
    }
  }
}

Communication communication_by_name(const std::string& name) {
  if (name == "auto") return Communication::kAuto;
  if (name == "ring") return Communication::kRing;
  if (name == "hierarchical") return Communication::kHierarchical;
  if (name == "nccl") return Communication::kNccl;
  throw ConfigError(str("communication '", name, "': use auto, ring, hierarchical or nccl"));
}

void check_communication_device(const StrategySpec& strategy, bool on_gpu, const std::string& device,
                                const std::string& source) {
  if (strategy.communication != Communication::kNccl || on_gpu) return;
  throw ConfigError(str(source, ": ", strategy.path, ".communication: 'nccl' reduces device (GPU) buffers, and this "
                        "job's device is ", device, "; set \"device\": \"gpu\" on a machine with a GPU, or use "
                        "\"auto\" or \"ring\" (Gloo) for a CPU job"));
}

const StrategyEntry& find_strategy(const std::string& name) {
  return config::find_entry(strategies(), name, "strategy");
}

}  // namespace dtrain::strategy
