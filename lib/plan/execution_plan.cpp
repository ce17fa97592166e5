// make_execution_plan(): the task's role, its training group, how its gradients
// and a pipeline's activations travel, the split and the memory; devices,
// threads and prefetch come from plan_devices.cpp. Every strategy-type and
// communication decision of a run is here or in the strategy registry.
#include <algorithm>
#include <set>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "plan/plan_parts.h"
#include "strategy/sync/fully_sharded.h"
#include "strategy/planning/parallel_grid.h"
#include "strategy/planning/tensor_split.h"

namespace dtrain::plan {
namespace {

using strategy::Communication;
using strategy::CrossTask;

Role role_of(const strategy::StrategyEntry& entry, const config::ClusterConfig& cluster) {
  if (cluster.single_process()) return Role::kTrain;
  if (cluster.task.is(config::TaskType::kPs)) return Role::kServeVariables;  // check_cluster_roles: only under parameter_server
  if (cluster.task.is(config::TaskType::kEvaluator)) return Role::kEvaluate;
  if (entry.cross_task != CrossTask::kParameterServer && cluster.spec.rank(cluster.task) < 0) return Role::kWait;
  return Role::kTrain;
}

// The host part of a task's address; "" where it is not known yet (env:// before
// registration).
std::string host_of(const config::ClusterSpec& spec, const config::TaskId& task) {
  const std::string& address = spec.address(task);
  return address.empty() ? std::string() : config::parse_host_port(address, task.str()).host;
}

// The machine of each training rank: as the tasks said when they met, else the
// host part of each address (an unknown one counts as a machine of its own).
std::vector<std::string> training_hosts(const config::ClusterSpec& spec, const Machine& machine) {
  if (!machine.host_of_rank.empty()) return machine.host_of_rank;
  std::vector<std::string> hosts(static_cast<size_t>(std::max(0, spec.world_size())));
  for (const config::TaskId& t : spec.all_tasks())
    if (const int r = spec.rank(t); r >= 0) {
      const std::string host = host_of(spec, t);
      hosts[static_cast<size_t>(r)] = host.empty() ? str("unknown#", r) : host;
    }
  return hosts;
}

// The hosts of the current members only (Machine::members; all without them).
std::vector<std::string> member_hosts(const std::vector<std::string>& hosts, const Machine& machine) {
  if (machine.members.empty()) return hosts;
  std::vector<std::string> out;
  for (int r : machine.members)
    if (r >= 0 && static_cast<size_t>(r) < hosts.size()) out.push_back(hosts[static_cast<size_t>(r)]);
  return out;
}

// Tasks of the job on this task's machine, by the addresses (before the tasks met).
int tasks_on_host_by_address(const config::ClusterConfig& cluster) {
  const std::string mine = host_of(cluster.spec, cluster.task);
  if (mine.empty()) return 1;
  const std::vector<config::TaskId> tasks = cluster.spec.all_tasks();
  return std::max<int>(1, static_cast<int>(std::count_if(tasks.begin(), tasks.end(), [&](const config::TaskId& t) {
                         return host_of(cluster.spec, t) == mine;
                       })));
}

bool nccl_allowed(const job::JobConfig& job, const Machine& machine) {
  const Communication c = job.strategy.communication;
  return machine.nccl_built && (c == Communication::kAuto || c == Communication::kNccl);
}

// More GPU tasks on this machine than GPUs: two of them compute on one GPU
// (LOCAL_RANK % GPUs), and NCCL refuses two ranks on one GPU ("Duplicate GPU
// detected") unless NCCL_HOSTID tells the processes apart. "" when they do not
// share, else what to say.
std::string shared_gpu(const Machine& machine, const ExecutionPlan& p) {
  if (p.device().is_cpu() || machine.gpus <= 0 || p.tasks_on_host <= machine.gpus || machine.host.nccl_hostid)
    return "";
  return str(p.tasks_on_host, " tasks on this machine share its ", machine.gpus, " GPU",
             machine.gpus == 1 ? "" : "s", ", and NCCL refuses two ranks on one GPU");
}

// The training tasks' group of a task that trains with an all-reduce strategy in a cluster.
TasksGroup plan_tasks_group(const job::JobConfig& job, const ExecutionPlan& p, Decision& d) {
  d.what = "training tasks";
  std::string why;
  TasksGroup group = training_tasks_group(job.strategy.communication, p.strategy->point_to_point,
                                          p.training_tasks, p.machines, &why);
  if (job.strategy.tensor_parallel > 1 && p.training_tasks > job.strategy.tensor_parallel &&
      group == TasksGroup::kHierarchical && p.machines > 1) {
    // (a group of the grid across machines is a Gloo sub-group: the hierarchical one cannot be split)
    group = TasksGroup::kGloo;
    why = str("strategy.tensor_parallel ", job.strategy.tensor_parallel, " over ", p.training_tasks,
              " training tasks on ", p.machines, " machines: the copies' and the parts' groups across machines are "
              "Gloo sub-groups, whatever communication says");
  }
  d.choice = tasks_group_name(group);
  d.why = str(why, p.met || group == TasksGroup::kGlooRing ? "" : " (machines by the addresses; the rendezvous confirms)");
  return group;
}

// ZeRO-2/3's units when min_unit_params groups layers: ", layers grouped into ...", else "".
std::string units_text(const strategy::StrategySpec& strategy) {
  if (strategy.min_unit_params <= 0) return "";
  return str(", layers grouped into units of at least ", strategy.min_unit_params, " parameters");
}

// Why the plan's gradients go where strategy::gradient_path sends them.
std::string gradients_why(Gradients g, const job::JobConfig& job, const ExecutionPlan& p, const std::string& shared) {
  const strategy::StrategySpec& s = job.strategy;
  const int n = p.local_replicas();
  const bool on_gpu = !p.device().is_cpu();
  switch (g) {
    case Gradients::kParameterServers:
      return str("parameter_server, mode ", s.mode == ps::UpdateMode::kSync    ? "sync"
                                            : s.mode == ps::UpdateMode::kStale ? "stale"
                                                                               : "async");
    case Gradients::kStageCopies:
    case Gradients::kStageAlone:
      return str("strategy.data_parallel ", strategy::pipeline_copies(s, p.training_tasks),
                 s.data_parallel == 0 ? " (the rest of the tasks)" : "",
                 s.tensor_parallel > 1 ? str(", tensor_parallel ", s.tensor_parallel,
                                             ": each part of a stage's gradients averaged over the copies' tasks "
                                             "holding it")
                                       : "");
    case Gradients::kCentralCopy: return str(p.strategy->name, " with ", n, " replica", n == 1 ? "" : "s");
    case Gradients::kShardedOptimizer: return "strategy.shard_optimizer_state";
    case Gradients::kShardedGradients: return str("strategy.shard \"gradients\"", units_text(s));
    case Gradients::kShardedParameters:
      return str("strategy.shard \"parameters\"", s.prefetch ? ", the next unit's gather prefetched" : "",
                 units_text(s));
    case Gradients::kReplicasThenTasks: return str(n, " replicas in each task");
    case Gradients::kNccl:
      return str("a GPU job, strategy.communication ", s.communication == Communication::kNccl ? "nccl" : "auto",
                 ", a build with NCCL");
    case Gradients::kLocalNccl: return str(n, " replicas on GPUs, a build with NCCL");
    case Gradients::kLocalSharedMemory:
      return str(n, " replicas in this process", on_gpu ? " (GPU gradients through host copies)" : "");
    case Gradients::kTasks:
      if (s.tensor_parallel > 1)
        return str("strategy.tensor_parallel ", s.tensor_parallel, ": each part's gradients all-reduced over the ",
                   p.training_tasks / s.tensor_parallel, " tasks holding it, one in each copy");
      if (!shared.empty()) return str(shared, ": through host copies and Gloo");
      return on_gpu ? "a GPU job without NCCL (strategy.communication, or the build): through host copies"
                    : "one replica per task";
    case Gradients::kNone:
      if (s.tensor_parallel > 1 && p.needs_tasks_group())
        return "strategy.tensor_parallel: each task's gradients are of its own part of the split layers, or the "
               "same on every task for the others; the split layers' all-reduces run inside them";
      return p.strategy->cross_task == CrossTask::kAllReduce
                 ? str(p.strategy->name,
                       " needs a cluster: run the job with `dtrain launch` or give every task TF_CONFIG")
                 : "one replica";
  }
  return "";
}

// Where this task's gradients are combined: strategy::gradient_path's rule with
// what this machine offers, after the choices it cannot make (ConfigError).
Gradients plan_gradients(const job::JobConfig& job, const Machine& machine, const ExecutionPlan& p, Decision& d) {
  d.what = "gradients";
  const bool on_gpu = !p.device().is_cpu();
  strategy::GradientInputs in;
  in.local_replicas = p.local_replicas();
  in.training_tasks = p.training_tasks;
  in.tasks_group = p.needs_tasks_group();
  in.nccl_tasks = in.nccl_local = on_gpu && nccl_allowed(job, machine);
  Gradients g = strategy::gradient_path(job.strategy, *p.strategy, in);
  // One GPU task's gradients over the tasks: a GPU shared by two tasks rules NCCL out.
  const bool one_gpu_replica = on_gpu && job.strategy.tensor_parallel <= 1 &&
                               (g == Gradients::kNccl || g == Gradients::kTasks);
  const std::string shared = one_gpu_replica ? shared_gpu(machine, p) : "";
  if (!shared.empty()) {  // Gloo through host copies, unless NCCL was asked for by name
    if (job.strategy.communication == Communication::kNccl)
      throw ConfigError(str(job.strategy.path, ".communication: 'nccl', but ", shared,
                            " (\"Duplicate GPU detected\"); give each task a GPU of its own, use \"auto\" (Gloo "
                            "through host copies), or give each task its own NCCL_HOSTID with NCCL_P2P_DISABLE=1 "
                            "NCCL_SHM_DISABLE=1"));
    g = Gradients::kTasks;
  }
  if (g == Gradients::kLocalSharedMemory && on_gpu && job.strategy.communication == Communication::kNccl)
    throw ConfigError(
        str(job.strategy.path, ".communication: 'nccl' needs a build of dtrain with NCCL; use \"auto\""));
  d.choice = gradients_name(g);
  d.why = gradients_why(g, job, p, shared);
  return g;
}

Activations plan_activations(const job::JobConfig& job, const Machine& machine, const ExecutionPlan& p,
                             Decision& d) {
  d.what = "activations";
  const bool nccl = !p.device().is_cpu() && nccl_allowed(job, machine);
  d.choice = activations_name(nccl ? Activations::kNccl : Activations::kGloo);
  d.why = nccl ? "a GPU job in a build with NCCL; the stages compare their GPUs when they meet"
               : p.device().is_cpu() ? "the stages compute on the CPU"
                                     : "a GPU job without NCCL (strategy.communication, or the build): host copies";
  return nccl ? Activations::kNccl : Activations::kGloo;
}

Decision split_decision(const strategy::StageSplit& split, bool measure, const job::JobConfig& job) {
  const std::string layers = strategy::describe_split(split, nn::describe_layers(job.model));
  if (measure)
    return {"pipeline split", layers,
            "strategy.stages auto: by parameter bytes until the chief measures each layer's time when the tasks meet"};
  return {"pipeline split", layers, split.how};
}

Decision memory_decision(const TaskMemory& m) {
  return {"memory", format_bytes(static_cast<double>(m.estimate.total)),
          !m.checked ? std::string("the whole model (each pipeline stage holds its own layers, estimated once the "
                                   "cluster cuts it)")
          : m.heading.empty() ? std::string("this task's estimate, held against runtime.memory_limit")
                              : str(m.heading, "; held against runtime.memory_limit")};
}

// tensor_parallel: what it cannot do yet is refused here, before any task starts
// (validate, launch), and the split (the strategy applies the same pure
// function of the model and the stages: tensor_parallel.h).
// strategy.elastic batch "global": how the current members take the global
// batch, and how fewer would (down to min_workers).
Decision elastic_batch_decision(const job::JobConfig& job, int start_tasks, int tasks) {
  const int64_t accumulation = job.train.gradient_accumulation_steps, batch = job.train.batch_size_per_replica;
  const strategy::ElasticSplit now = strategy::elastic_split(accumulation, batch, start_tasks, tasks);
  std::string fewer;
  bool uneven = !now.even();
  for (int n = tasks - 1; n >= std::max<int64_t>(1, job.strategy.elastic.min_workers); --n) {
    const strategy::ElasticSplit split = strategy::elastic_split(accumulation, batch, start_tasks, n);
    fewer += str("; at ", n, " tasks: ", split.describe());
    uneven = uneven || !split.even();
  }
  return {"elastic batch", str(now.describe(), " by task"),
          str("the global batch of ", now.global_batch, " samples (", start_tasks, " tasks x ", accumulation, " x ",
              batch, ") kept at every size", fewer,
              uneven ? " (unequal shares are weighted by samples: the update is the global batch's)" : "")};
}

// The training tasks as copies x stages x tensor parts (strategy/planning/parallel_grid.h)
// and where this task is in it: its place and every group it belongs to.
strategy::ParallelGrid plan_grid(const job::JobConfig& job, const ExecutionPlan& p) {
  const int parts = static_cast<int>(job.strategy.tensor_parallel);
  const int stages = p.split ? static_cast<int>(p.split->stages()) : 1;
  const int copies = p.strategy->point_to_point ? strategy::pipeline_copies(job.strategy, p.training_tasks)
                                                : p.training_tasks / parts;
  const strategy::ParallelGrid grid(copies, stages, parts);
  DT_CHECK(grid.size() == p.training_tasks, "the grid ", grid.describe(), " of ", p.training_tasks, " training tasks");
  return grid;
}

Decision grid_decision(const strategy::ParallelGrid& grid, const ExecutionPlan& p) {
  Decision d{"parallel grid", grid.describe(), grid.describe_task(p.rank)};
  if (grid.pipeline() == 1 && grid.tensor() == 1) return d;  // (plain data parallelism: the training tasks' group)
  std::vector<std::string> how;
  if (grid.pipeline() > 1) how.push_back("pipeline: a Gloo sub-group (its stages send to each other)");
  const char* within = p.machines == 1 ? "shared memory (one machine)"
                                       : "shared memory where every group of the axis lies on one machine, else a "
                                         "Gloo sub-group";
  if (grid.data() > 1 && grid.data() < grid.size()) how.push_back(str("data: ", within));
  if (grid.tensor() > 1 && grid.tensor() < grid.size()) how.push_back(str("tensor: ", within));
  if (!how.empty()) d.why += str("; groups built once by the runtime: ", join(how, ", "));
  return d;
}

Decision tensor_split_decision(const job::JobConfig& job, const ExecutionPlan& p, bool in_group) {
  // (a pipeline's stages: a Dense pair cut by a boundary stays whole; without
  // the cluster, where strategy.stages names them)
  std::vector<size_t> stage_starts = p.split ? p.split->starts : std::vector<size_t>{};
  if (!p.split && !job.strategy.stages.empty())
    stage_starts = strategy::named_split(job.strategy, nn::describe_layers(job.model)).starts;
  const bool pipeline = job.strategy.stages_auto || !job.strategy.stages.empty();
  if (in_group && p.training_tasks > 1)
    strategy::check_tensor_parallel(job.strategy_job(), p.training_tasks, stage_starts);
  if (in_group && !p.device().is_cpu())
    throw ConfigError(str(job.strategy.path, ".tensor_parallel: runs on the CPU so far, and this task's device is ",
                          p.device().str(), "; set \"device\": \"cpu\""));
  strategy::check_tensor_split_names(job.model, job.strategy);
  const int t = static_cast<int>(job.strategy.tensor_parallel);
  const std::vector<strategy::SplitLayer> split = strategy::tensor_split_plan(
      job.model, t, job.strategy.tensor_whole, strategy::vocabulary_parallel_loss(job.loss), stage_starts);
  // (grid_text's stages: any count > 1 says "pipeline" where the cluster has not cut it yet)
  const int stages =
      p.split ? static_cast<int>(p.split->stages()) : pipeline ? std::max<int>(2, stage_starts.size()) : 1;
  const std::set<std::string>& whole = job.strategy.tensor_whole;
  return {"tensor split", split.empty() ? "none" : strategy::describe_tensor_split(job.model, split),
          str(strategy::grid_text(p.training_tasks, t, stages),
              " (strategy.tensor_parallel; Megatron's split: Dense pairs by columns then rows, attention by heads",
              whole.empty() ? std::string()
                            : str("; kept whole by strategy.tensor_split: ", join({whole.begin(), whole.end()}, ", ")),
              ")")};
}

}  // namespace

TasksGroup training_tasks_group(strategy::Communication communication, bool point_to_point, int training_tasks,
                                int machines, std::string* why) {
  std::string reason;
  TasksGroup group = TasksGroup::kGloo;
  const std::string layout = str(training_tasks, " training task", training_tasks == 1 ? "" : "s", " on ", machines,
                                 " machine", machines == 1 ? "" : "s");
  if (point_to_point) {
    group = TasksGroup::kGlooRing;
    reason = "a pipeline's stages send to each other over Gloo's sub-groups, whatever communication says";
  } else {
    switch (communication) {
      case Communication::kRing:
        group = TasksGroup::kGlooRing;
        reason = "strategy.communication ring";
        break;
      case Communication::kHierarchical:
        group = TasksGroup::kHierarchical;
        reason = str("strategy.communication hierarchical; ", layout);
        break;
      case Communication::kNccl:
        reason = "strategy.communication nccl: NCCL carries the gradients, the other collectives go through Gloo";
        break;
      case Communication::kAuto:
        group = machines < training_tasks ? TasksGroup::kHierarchical : TasksGroup::kGloo;
        reason = str("auto: ", layout,
                     group == TasksGroup::kHierarchical ? ": tasks share a machine" : ": each on a machine of its own");
        break;
    }
  }
  if (why) *why = reason;
  return group;
}


ExecutionPlan make_execution_plan(const job::JobConfig& job, const config::ClusterConfig& cluster,
                                  const Machine& machine) {
  strategy::check_cluster_roles(job.strategy, cluster.spec, cluster.source);
  // strategy.communication nccl with "device": "auto" where auto means the CPU
  // (the job file's check let "auto" through: it may be a GPU).
  if (job.device == "auto" && job.strategy.communication == Communication::kNccl)
    strategy::check_communication_device(job.strategy, machine.gpus > 0,
                                         str("auto, which is the CPU here (no usable GPU: ", machine.why_no_gpu, ")"),
                                         job.source);
  ExecutionPlan p;
  p.strategy = &strategy::entry_of(job.strategy);
  p.role = role_of(*p.strategy, cluster);
  p.met = !machine.host_of_rank.empty();
  p.allow_tf32 = machine.host.allow_tf32;
  p.builds_alone = p.strategy->cross_task == CrossTask::kNothing;
  if (!cluster.single_process()) {
    p.task = cluster.task.str();
    p.cluster_source = cluster.source;
    p.rank = rank_among(cluster.spec.rank(cluster.task), machine.members);
    const std::vector<std::string> hosts = member_hosts(training_hosts(cluster.spec, machine), machine);
    p.machines = std::max<int>(1, static_cast<int>(std::set<std::string>(hosts.begin(), hosts.end()).size()));
    p.tasks_on_host = p.met ? std::max(1, machine.host.tasks_on_host) : tasks_on_host_by_address(cluster);
  } else {
    p.tasks_on_host = std::max(1, machine.host.tasks_on_host);
  }
  const bool in_group = p.role == Role::kTrain && p.strategy->cross_task == CrossTask::kAllReduce &&
                        !cluster.single_process();
  if (in_group) p.training_tasks = machine.members.empty() ? cluster.spec.world_size() : static_cast<int>(machine.members.size());
  if (job.strategy.elastic.on)
    strategy::check_elastic_batch(job.strategy.elastic, job.train.gradient_accumulation_steps,
                                  job.train.batch_size_per_replica,
                                  cluster.spec.world_size(), job.source);
  p.decisions.push_back({"role", role_name(p.role),
                         cluster.single_process() ? "one process, no cluster"
                                                  : str(p.task, " of the cluster from ", cluster.source, ", strategy ",
                                                        p.strategy->name)});
  if (job.strategy.elastic.on && in_group)
    p.decisions.push_back(elastic_batch_decision(job, cluster.spec.world_size(), p.training_tasks));

  Decision devices, threads, prefetch;
  p.replicas = plan_devices(job, machine, p.role, devices);
  p.threads = plan_threads(job, machine, p.tasks_on_host, threads);
  p.prefetch = plan_prefetch(job, machine, p.tasks_on_host, p.threads, p.local_replicas(), p.device(), prefetch);
  p.decisions.insert(p.decisions.end(), {devices, threads, openmp_wait_decision(machine.host), prefetch});
  if (p.role != Role::kTrain) return p;

  if (in_group) {
    Decision d;
    p.tasks = plan_tasks_group(job, p, d);
    p.decisions.push_back(d);
  }
  Decision gradients;
  p.gradients = plan_gradients(job, machine, p, gradients);
  p.decisions.push_back(gradients);
  if (p.strategy->point_to_point) {
    Decision d;
    p.activations = plan_activations(job, machine, p, d);
    p.decisions.push_back(d);
  }
  if (in_group && (job.strategy.stages_auto || !job.strategy.stages.empty())) {
    p.split = strategy::pipeline_split(job.strategy, nn::describe_layers(job.model), p.training_tasks);
    p.measure_split = job.strategy.stages_auto;
    p.decisions.push_back(split_decision(*p.split, p.measure_split, job));
  }
  if (job.strategy.tensor_parallel > 1) p.decisions.push_back(tensor_split_decision(job, p, in_group));
  if (in_group && p.training_tasks > 1 && p.rank >= 0) {
    const strategy::ParallelGrid grid = plan_grid(job, p);
    if (grid.pipeline() > 1 || grid.tensor() > 1) p.grid = grid;
    p.decisions.push_back(grid_decision(grid, p));
  }
  if (job.strategy.shard == strategy::ShardMode::kGradients || job.strategy.shard == strategy::ShardMode::kParameters) {
    // What ZeRO-2/3 cannot do yet is refused before any task starts (validate, launch).
    if (in_group)
      strategy::FullShard::check_supported(job.strategy_job(), static_cast<int>(job.strategy.replicas), p.device());
  }
  p.memory = task_memory(job, p.training_tasks, std::max(0, p.rank),
                         p.split && p.training_tasks >= 2 ? &*p.split : nullptr);
  p.decisions.push_back(memory_decision(*p.memory));
  return p;
}

const Decision* ExecutionPlan::decision(const std::string& what) const {
  for (const Decision& d : decisions)
    if (d.what == what) return &d;
  return nullptr;
}

ExecutionPlan with_stage_split(const ExecutionPlan& plan, const job::JobConfig& job, strategy::StageSplit split) {
  ExecutionPlan p = plan;
  p.split = std::move(split);
  p.measure_split = false;
  p.memory = task_memory(job, p.training_tasks, std::max(0, p.rank), p.training_tasks >= 2 ? &*p.split : nullptr);
  for (Decision& d : p.decisions) {
    if (d.what == "pipeline split") d = split_decision(*p.split, false, job);
    if (d.what == "tensor split") d = tensor_split_decision(job, p, true);  // (the pairs the measured stages cut)
    if (d.what == "memory") d = memory_decision(*p.memory);
  }
  return p;
}

std::vector<std::string> changed_parts(const ExecutionPlan& a, const ExecutionPlan& b) {
  std::vector<std::string> out;
  const auto differ = [&](bool changed, const char* what) {
    if (changed) out.push_back(what);
  };
  differ(a.role != b.role, "role");
  differ(a.rank != b.rank || a.training_tasks != b.training_tasks, "training tasks");
  differ(a.tasks != b.tasks || a.machines != b.machines, "tasks group");
  differ(a.replicas != b.replicas, "devices");
  differ(a.threads != b.threads, "threads");
  differ(a.prefetch != b.prefetch, "prefetch");
  differ(a.gradients != b.gradients, "gradients");
  differ(a.activations != b.activations, "activations");
  differ((a.split ? a.split->starts : std::vector<size_t>{}) != (b.split ? b.split->starts : std::vector<size_t>{}),
         "pipeline split");
  differ((a.memory ? a.memory->estimate.total : -1) != (b.memory ? b.memory->estimate.total : -1), "memory");
  return out;
}

}  // namespace dtrain::plan
