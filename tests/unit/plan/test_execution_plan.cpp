// The execution plan as a table: for each (strategy, device, cluster, machine),
// the task's role, its devices, threads, the training tasks' group, where the
// gradients go and how a pipeline's activations travel; then the errors the plan
// finds before anything is connected, a plan made again after the tasks met, a
// measured pipeline split, and the plan's text and JSON.
#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "comm/nccl/nccl_support.h"
#include "core/error.h"
#include "core/strings.h"
#include "plan/execution_plan.h"
#include "plan_fixtures.h"
#include "strategy/registry.h"

using namespace dtrain;
using Catch::Matchers::Contains;
using plan::Activations;
using plan::Gradients;
using plan::Role;
using plan::TasksGroup;

namespace {

struct Row {
  const char* name;
  std::string strategy;  // the strategy section's inside
  std::string device;
  int workers;  // 0: one process, no cluster
  int hosts;
  plan::Machine machine;
  // expected:
  Role role;
  std::string devices;
  int threads;
  TasksGroup tasks;
  Gradients gradients;
  Activations activations;
};

std::string devices_of(const plan::ExecutionPlan& p) {
  std::string out;
  for (const Device& d : p.replicas) out += (out.empty() ? "" : ", ") + d.str();
  return out;
}

}  // namespace

TEST_CASE("plan: every strategy's placement and wiring, on made-up machines") {
  const plan::Machine cpu2 = test::plan_machine(2);
  const plan::Machine gpus2 = test::plan_machine(8, 2, true);
  const plan::Machine gpus2_no_nccl = test::plan_machine(8, 2, false);
  const plan::Machine gpus2_rank1 = test::plan_machine(8, 2, true, 1);
  const plan::Machine gpus1 = test::plan_machine(8, 1, true);
  plan::Machine gpus1_hostid = gpus1;
  gpus1_hostid.host.nccl_hostid = "stage-1";
  const std::vector<Row> rows = {
      {"one_device alone", R"("type": "one_device")", "auto", 0, 1, cpu2, Role::kTrain, "cpu:0", 2,
       TasksGroup::kNone, Gradients::kNone, Activations::kNone},
      {"mirrored on the CPU", R"("type": "mirrored", "replicas": 2)", "auto", 0, 1, cpu2, Role::kTrain,
       "cpu:0, cpu:0", 2, TasksGroup::kNone, Gradients::kLocalSharedMemory, Activations::kNone},
      {"mirrored, a GPU per replica, NCCL", R"("type": "mirrored", "replicas": 2)", "auto", 0, 1, gpus2,
       Role::kTrain, "cuda:0, cuda:1", 8, TasksGroup::kNone, Gradients::kLocalNccl, Activations::kNone},
      {"mirrored, GPUs, ring: shared memory", R"("type": "mirrored", "replicas": 2, "communication": "ring")",
       "auto", 0, 1, gpus2, Role::kTrain, "cuda:0, cuda:1", 8, TasksGroup::kNone, Gradients::kLocalSharedMemory,
       Activations::kNone},
      {"mirrored, auto, fewer GPUs than replicas: the CPU", R"("type": "mirrored", "replicas": 2)", "auto", 0, 1,
       gpus1, Role::kTrain, "cpu:0, cpu:0", 8, TasksGroup::kNone, Gradients::kLocalSharedMemory, Activations::kNone},
      {"central_storage", R"("type": "central_storage", "replicas": 2)", "cpu", 0, 1, cpu2, Role::kTrain,
       "cpu:0, cpu:0", 2, TasksGroup::kNone, Gradients::kCentralCopy, Activations::kNone},
      {"multi_worker_mirrored alone: needs a cluster", R"("type": "multi_worker_mirrored")", "auto", 0, 1, cpu2,
       Role::kTrain, "cpu:0", 2, TasksGroup::kNone, Gradients::kNone, Activations::kNone},
      {"2 workers on one machine: hierarchical", R"("type": "multi_worker_mirrored")", "auto", 2, 1, cpu2,
       Role::kTrain, "cpu:0", 1, TasksGroup::kHierarchical, Gradients::kTasks, Activations::kNone},
      {"2 workers on 2 machines: Gloo", R"("type": "multi_worker_mirrored")", "auto", 2, 2, cpu2, Role::kTrain,
       "cpu:0", 2, TasksGroup::kGloo, Gradients::kTasks, Activations::kNone},
      {"communication ring", R"("type": "multi_worker_mirrored", "communication": "ring")", "auto", 2, 1, cpu2,
       Role::kTrain, "cpu:0", 1, TasksGroup::kGlooRing, Gradients::kTasks, Activations::kNone},
      {"communication hierarchical across machines",
       R"("type": "multi_worker_mirrored", "communication": "hierarchical")", "auto", 4, 2, cpu2, Role::kTrain,
       "cpu:0", 1, TasksGroup::kHierarchical, Gradients::kTasks, Activations::kNone},
      {"GPU job with NCCL", R"("type": "multi_worker_mirrored")", "gpu", 2, 2, gpus2, Role::kTrain, "cuda:0", 8,
       TasksGroup::kGloo, Gradients::kNccl, Activations::kNone},
      {"GPU job, LOCAL_RANK 1 picks cuda:1", R"("type": "multi_worker_mirrored")", "auto", 2, 2, gpus2_rank1,
       Role::kTrain, "cuda:1", 8, TasksGroup::kGloo, Gradients::kNccl, Activations::kNone},
      {"GPU job without NCCL: host copies", R"("type": "multi_worker_mirrored")", "gpu", 2, 2, gpus2_no_nccl,
       Role::kTrain, "cuda:0", 8, TasksGroup::kGloo, Gradients::kTasks, Activations::kNone},
      {"2 GPU workers sharing 1 GPU: host copies, not NCCL", R"("type": "multi_worker_mirrored")", "gpu", 2, 1,
       gpus1, Role::kTrain, "cuda:0", 4, TasksGroup::kHierarchical, Gradients::kTasks, Activations::kNone},
      {"2 GPU workers sharing 1 GPU with NCCL_HOSTID: NCCL", R"("type": "multi_worker_mirrored")", "gpu", 2, 1,
       gpus1_hostid, Role::kTrain, "cuda:0", 4, TasksGroup::kHierarchical, Gradients::kNccl, Activations::kNone},
      {"2 GPU workers on 2 GPUs of one machine: NCCL", R"("type": "multi_worker_mirrored")", "gpu", 2, 1, gpus2,
       Role::kTrain, "cuda:0", 4, TasksGroup::kHierarchical, Gradients::kNccl, Activations::kNone},
      {"ZeRO-1", R"("type": "multi_worker_mirrored", "shard_optimizer_state": true)", "auto", 2, 2, cpu2,
       Role::kTrain, "cpu:0", 2, TasksGroup::kGloo, Gradients::kShardedOptimizer, Activations::kNone},
      {"replicas in each task", R"("type": "multi_worker_mirrored", "replicas": 2)", "cpu", 2, 2, cpu2,
       Role::kTrain, "cpu:0, cpu:0", 2, TasksGroup::kGloo, Gradients::kReplicasThenTasks, Activations::kNone},
      {"pipeline of 2 stages", R"("type": "pipeline", "stages": ["dense_1"])", "auto", 2, 1, cpu2, Role::kTrain,
       "cpu:0", 1, TasksGroup::kGlooRing, Gradients::kStageAlone, Activations::kGloo},
      {"pipeline, 2 copies", R"("type": "pipeline", "stages": ["dense_1"], "data_parallel": 2)", "auto", 4, 4,
       cpu2, Role::kTrain, "cpu:0", 2, TasksGroup::kGlooRing, Gradients::kStageCopies, Activations::kGloo},
      {"pipeline on GPUs with NCCL", R"("type": "pipeline", "stages": ["dense_1"])", "gpu", 2, 2, gpus2,
       Role::kTrain, "cuda:0", 8, TasksGroup::kGlooRing, Gradients::kStageAlone, Activations::kNccl},
  };
  for (const Row& r : rows) {
    INFO(r.name);
    const job::JobConfig job = test::plan_job(r.strategy, r.device);
    const config::ClusterConfig cluster =
        r.workers == 0 ? config::ClusterConfig{} : test::plan_cluster(r.workers, r.hosts, {"worker", 0});
    const plan::ExecutionPlan p = plan::make_execution_plan(job, cluster, r.machine);
    CHECK(p.role == r.role);
    CHECK(devices_of(p) == r.devices);
    CHECK(p.threads == r.threads);
    CHECK(p.tasks == r.tasks);
    CHECK(p.gradients == r.gradients);
    CHECK(p.activations == r.activations);
    REQUIRE(p.memory);
    CHECK(p.memory->estimate.total > 0);
    // Every decision says why.
    for (const plan::Decision& d : p.decisions) {
      INFO(d.what);
      CHECK(!d.choice.empty());
      CHECK(!d.why.empty());
    }
  }
}

TEST_CASE("plan: the roles of a parameter_server cluster and of an evaluator") {
  const job::JobConfig ps_job = test::plan_job(R"("type": "parameter_server", "mode": "sync")");
  const plan::Machine m = test::plan_machine(2);
  const auto role_of = [&](const job::JobConfig& job, const config::TaskId& task, int ps, bool chief, bool evaluator) {
    return plan::make_execution_plan(job, test::plan_cluster(2, 1, task, ps, chief, evaluator), m);
  };
  const plan::ExecutionPlan chief = role_of(ps_job, {"chief", 0}, 1, true, false);
  CHECK(chief.role == Role::kTrain);
  CHECK(chief.gradients == Gradients::kParameterServers);
  CHECK(chief.tasks == TasksGroup::kNone);  // workers talk to the ps tasks
  CHECK(chief.training_tasks == 1);
  const plan::ExecutionPlan server = role_of(ps_job, {"ps", 0}, 1, true, false);
  CHECK(server.role == Role::kServeVariables);
  CHECK_FALSE(server.memory);  // a ps task's variables are not a training task's memory
  const job::JobConfig mwms = test::plan_job(R"("type": "multi_worker_mirrored")");
  const plan::ExecutionPlan evaluator = role_of(mwms, {"evaluator", 0}, 0, false, true);
  CHECK(evaluator.role == Role::kEvaluate);
  CHECK(evaluator.tasks == TasksGroup::kNone);
  CHECK(devices_of(evaluator) == "cpu:0");
}

TEST_CASE("plan: the errors it finds before anything is connected") {
  const plan::Machine cpu = test::plan_machine(2);
  // NCCL asked for where auto means the CPU.
  CHECK_THROWS_AS(plan::make_execution_plan(test::plan_job(R"("type": "multi_worker_mirrored", "communication": "nccl")"),
                                            test::plan_cluster(2, 1, {"worker", 0}), cpu),
                  ConfigError);
  // A GPU that is not there.
  CHECK_THROWS_WITH(plan::make_execution_plan(test::plan_job(R"("type": "one_device")", "gpu"), {}, cpu),
                    Contains("asks for a GPU, but none is usable: no CUDA device"));
  CHECK_THROWS_WITH(plan::make_execution_plan(test::plan_job(R"("type": "one_device")", "cuda:3"), {},
                                              test::plan_machine(2, 2, true)),
                    Contains("asks for GPU 3, but this machine has 2"));
  // mirrored on GPUs over NCCL in a build without it.
  CHECK_THROWS_WITH(plan::make_execution_plan(
                        test::plan_job(R"("type": "mirrored", "replicas": 2, "communication": "nccl")", "gpu"), {},
                        test::plan_machine(2, 2, false)),
                    Contains("'nccl' needs a build of dtrain with NCCL"));
  // NCCL asked for where two tasks share the one GPU (NCCL refuses duplicate GPUs).
  // A build without NCCL refuses "nccl" before that, when it reads the job.
  auto shared_gpu_nccl = [] {
    return plan::make_execution_plan(
        test::plan_job(R"("type": "multi_worker_mirrored", "communication": "nccl")", "gpu"),
        test::plan_cluster(2, 1, {"worker", 1}), test::plan_machine(8, 1, true));
  };
  if (comm::kNcclBuilt)
    CHECK_THROWS_WITH(shared_gpu_nccl(), Contains("2 tasks on this machine share its 1 GPU") && Contains("NCCL_HOSTID"));
  else
    CHECK_THROWS_WITH(shared_gpu_nccl(), Contains("'nccl' needs a build of dtrain with NCCL"));
  // ps tasks under a strategy that keeps no variables there.
  CHECK_THROWS_WITH(plan::make_execution_plan(test::plan_job(R"("type": "multi_worker_mirrored")"),
                                              test::plan_cluster(2, 1, {"worker", 0}, 1), cpu),
                    Contains("would idle"));
  // A pipeline whose stages do not match the tasks.
  CHECK_THROWS_AS(plan::make_execution_plan(test::plan_job(R"("type": "pipeline", "stages": ["dense_1"])"),
                                            test::plan_cluster(3, 1, {"worker", 0}), cpu),
                  ConfigError);
}

TEST_CASE("plan: made again once the tasks met, only what changed differs") {
  const job::JobConfig job = test::plan_job(R"("type": "multi_worker_mirrored")");
  // The addresses say one machine; the rendezvous says each task is on a machine of its own.
  const config::ClusterConfig cluster = test::plan_cluster(2, 1, {"worker", 1});
  plan::Machine machine = test::plan_machine(2);
  const plan::ExecutionPlan before = plan::make_execution_plan(job, cluster, machine);
  CHECK(before.tasks == TasksGroup::kHierarchical);
  CHECK_FALSE(before.met);
  CHECK(before.rank == 1);
  machine.host_of_rank = {"machine-a", "machine-b"};
  machine.host.tasks_on_host = 1;
  const plan::ExecutionPlan after = plan::make_execution_plan(job, cluster, machine);
  CHECK(after.met);
  CHECK(after.tasks == TasksGroup::kGloo);
  CHECK(after.threads == 2);
  CHECK(plan::changed_parts(before, after) == std::vector<std::string>{"tasks group", "threads"});
  CHECK(plan::changed_parts(after, after).empty());
}

TEST_CASE("plan: an elastic job's membership: rank and training tasks among the members, and its refusals") {
  const job::JobConfig job = test::plan_job(R"("type": "multi_worker_mirrored", "elastic": {"min_workers": 2})");
  // 4 workers on two machines; worker:1 was lost: worker:3 is rank 2 of 3.
  const config::ClusterConfig cluster = test::plan_cluster(4, 2, {"worker", 3});
  plan::Machine machine = test::plan_machine(2);
  machine.host_of_rank = {"a", "b", "a", "b"};
  job::JobConfig two = job;  // 4 x 2 accumulation steps split over 2, 3 and 4 tasks? not 3
  two.train.gradient_accumulation_steps = 3;
  const plan::ExecutionPlan all = plan::make_execution_plan(two, cluster, machine);
  CHECK(all.rank == 3);
  CHECK(all.training_tasks == 4);
  CHECK(all.machines == 2);
  machine.members = {0, 2, 3};
  const plan::ExecutionPlan after = plan::make_execution_plan(two, cluster, machine);
  CHECK(after.rank == 2);
  CHECK(after.training_tasks == 3);
  CHECK(plan::changed_parts(all, after) == std::vector<std::string>{"training tasks"});
  // Only "a" is left: one machine, shared memory alone.
  machine.members = {0, 2};
  const plan::ExecutionPlan one_machine = plan::make_execution_plan(two, test::plan_cluster(4, 2, {"worker", 2}), machine);
  CHECK(one_machine.rank == 1);
  CHECK(one_machine.machines == 1);
  CHECK(one_machine.tasks == TasksGroup::kHierarchical);

  // accumulation 1: 4 micro-batches over 3 tasks are dealt out unevenly, and the plan says how.
  machine.members = {0, 2, 3};
  const plan::ExecutionPlan uneven = plan::make_execution_plan(job, cluster, machine);
  const auto decision = std::find_if(uneven.decisions.begin(), uneven.decisions.end(),
                                     [](const plan::Decision& d) { return d.what == "elastic batch"; });
  REQUIRE(decision != uneven.decisions.end());
  const int64_t batch = job.train.batch_size_per_replica;
  const strategy::ElasticSplit three = strategy::elastic_split(1, batch, 4, 3);
  CHECK(decision->choice == three.describe() + " by task");
  CHECK_THAT(decision->why, Contains(str("the global batch of ", 4 * batch, " samples (4 tasks x 1 x ", batch, ")")) &&
                                Contains("at 2 tasks: 2 micro-batches of " + std::to_string(batch) + " samples") &&
                                Contains("weighted by samples"));
  // A micro-step with fewer samples than tasks is refused when the job is planned.
  job::JobConfig tiny = job;
  tiny.train.batch_size_per_replica = 1;  // 4 samples a step; at 3 tasks 2 micro-steps of 2 samples
  CHECK_THROWS_WITH(plan::make_execution_plan(tiny, cluster, test::plan_machine(2)),
                    Contains("strategy.elastic.batch 'global'") && Contains("cannot give each of 3 tasks") &&
                        Contains("raise train.batch_size_per_replica"));
  // The cluster outside [min_workers, max_workers].
  CHECK_THROWS_WITH(plan::make_execution_plan(
                        test::plan_job(R"("type": "multi_worker_mirrored", "elastic": {"min_workers": 3})"),
                        test::plan_cluster(2, 1, {"worker", 0}), test::plan_machine(2)),
                    Contains("strategy.elastic.min_workers: 3 training tasks, but the cluster"));
  CHECK_THROWS_WITH(plan::make_execution_plan(
                        test::plan_job(R"("type": "multi_worker_mirrored", "elastic": {"max_workers": 1})"),
                        test::plan_cluster(2, 1, {"worker", 0}), test::plan_machine(2)),
                    Contains("strategy.elastic.max_workers: 1 training tasks"));
  // Strategies and settings it does not go with, when the job is read.
  CHECK_THROWS_WITH(test::plan_job(R"("type": "parameter_server", "elastic": {})"),
                    Contains("only multi_worker_mirrored is elastic") && Contains("parameter_server survives"));
  CHECK_THROWS_WITH(test::plan_job(R"("type": "pipeline", "stages": ["dense_1"], "elastic": {})"),
                    Contains("only multi_worker_mirrored is elastic") && Contains("cut again"));
  CHECK_THROWS_WITH(
      test::plan_job(R"("type": "multi_worker_mirrored", "shard_optimizer_state": true, "elastic": {})"),
      Contains("does not go with shard \"optimizer_state\""));
  CHECK_THROWS_WITH(test::plan_job(R"("type": "multi_worker_mirrored", "elastic": {"batch": "per_replica"})"),
                    Contains("batch"));
  CHECK_THROWS_WITH(test::plan_job(R"("type": "multi_worker_mirrored", "elastic": {"min_workers": 3, "max_workers": 2})"),
                    Contains("below min_workers 3"));
}

TEST_CASE("plan: a pipeline's auto split is replaced by the measured one") {
  const job::JobConfig job = test::plan_job(R"("type": "pipeline", "stages": "auto")");
  const plan::ExecutionPlan p = plan::make_execution_plan(job, test::plan_cluster(2, 1, {"worker", 1}),
                                                          test::plan_machine(2));
  REQUIRE(p.split);
  CHECK(p.measure_split);
  CHECK(p.split->starts == std::vector<size_t>{0, 1});
  const plan::ExecutionPlan measured = plan::with_stage_split(p, job, strategy::StageSplit{{0, 1}, "auto: measured time"});
  CHECK_FALSE(measured.measure_split);
  REQUIRE(measured.memory);
  CHECK(measured.memory->heading == "Pipeline stage 1 of 2: layers dense_1..dense_1");
  CHECK_THAT(plan::describe(measured), Contains("pipeline split: dense | dense_1 (auto: measured time)"));
}

TEST_CASE("plan: the text and the JSON name every decision and why") {
  const job::JobConfig job = test::plan_job(R"("type": "multi_worker_mirrored")");
  const plan::ExecutionPlan p =
      plan::make_execution_plan(job, test::plan_cluster(2, 1, {"worker", 0}), test::plan_machine(2));
  const std::string text = plan::describe(p);
  CHECK_THAT(text, Contains("role: train (worker:0 of the cluster from TF_CONFIG, strategy multi_worker_mirrored)"));
  CHECK_THAT(text, Contains("device: cpu:0 (\"device\": \"auto\": no usable GPU (no CUDA device))"));
  CHECK_THAT(text, Contains("threads: 1 (the 2 cores this process may use, shared by the 2 tasks of this job on "
                            "this machine)"));
  CHECK_THAT(text, Contains("training tasks: hierarchical: shared memory within a machine, Gloo between machines "
                            "(auto: 2 training tasks on 1 machine: tasks share a machine"));
  CHECK_THAT(text, Contains("gradients: all-reduced over the training tasks' group (one replica per task)"));
  const nlohmann::json j = nlohmann::json::parse(plan::to_json(p));
  CHECK(j["strategy"] == "multi_worker_mirrored");
  CHECK(j["task"] == "worker:0");
  CHECK(j["devices"] == nlohmann::json::array({"cpu:0"}));
  CHECK(j["threads"] == 1);
  CHECK(j["training_tasks"] == 2);
  CHECK(j["decisions"].size() == p.decisions.size());
  CHECK(j["memory"]["total_bytes"].get<int64_t>() == p.memory->estimate.total);
}

TEST_CASE("plan: the parallel grid and this task's place and groups in it") {
  // 4 tasks as 2 copies x tensor_parallel 2 (tiny_dense_job's Dense pair splits).
  const job::JobConfig job = test::plan_job(R"("type": "multi_worker_mirrored", "tensor_parallel": 2)");
  const plan::ExecutionPlan p = plan::make_execution_plan(job, test::plan_cluster(4, 1, {"worker", 3}),
                                                          test::plan_machine(2));
  const plan::Decision* grid = p.decision("parallel grid");
  REQUIRE(grid);
  CHECK(grid->choice == "2 data x 1 pipeline x 2 tensor (4 tasks)");
  CHECK(grid->why == "rank 3: copy 1, part 1; tensor group [2, 3], data group [1, 3]; groups built once by the "
                     "runtime: data: shared memory (one machine), tensor: shared memory (one machine)");
  REQUIRE(p.grid);
  CHECK(*p.grid == strategy::ParallelGrid(2, 1, 2));
  // On one machine the training tasks' group is shared memory too (nothing is split from it) ...
  CHECK(p.tasks == plan::TasksGroup::kHierarchical);
  // ... on two, the groups that cross machines are Gloo sub-groups of a Gloo group.
  const plan::ExecutionPlan two = plan::make_execution_plan(job, test::plan_cluster(4, 2, {"worker", 3}),
                                                            test::plan_machine(2));
  CHECK(two.tasks == plan::TasksGroup::kGloo);
  CHECK_THAT(two.decision("parallel grid")->why,
             Catch::Contains("data: shared memory where every group of the axis lies on one machine, else a Gloo "
                             "sub-group"));
  // Plain data parallelism: one data group of every task.
  const plan::ExecutionPlan data = plan::make_execution_plan(test::plan_job(R"("type": "multi_worker_mirrored")"),
                                                             test::plan_cluster(3, 1, {"worker", 1}),
                                                             test::plan_machine(2));
  REQUIRE(data.decision("parallel grid"));
  CHECK(data.decision("parallel grid")->why == "rank 1: copy 1; data group [0, 1, 2]");
  CHECK_FALSE(data.grid);  // (no groups but the training tasks' own)
  // One task alone has none.
  CHECK_FALSE(plan::make_execution_plan(test::plan_job(R"("type": "one_device")"), config::ClusterConfig{},
                                        test::plan_machine(2))
                  .decision("parallel grid"));
}
