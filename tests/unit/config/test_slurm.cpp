// Tests of the Slurm resolver (config/slurm.h): Slurm's host-list and tasks-per-node
// syntax, each of TensorFlow's SlurmClusterResolver tests translated (same
// variables, same cluster, same task), dtrain's own rules (the caller's job order,
// Slurm's host order, SLURM_LOCALID checks, job ids) and the error messages, which
// must name the variable or key, its value and a fix.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/slurm.h"
#include "core/error.h"

namespace dtrain::config {
namespace {

using Catch::Matchers::Contains;
using Strings = std::vector<std::string>;

Strings hosts(const std::string& text) { return expand_slurm_hostlist(text, "SLURM_STEP_NODELIST"); }

std::vector<int> tasks(const std::string& text) {
  return expand_slurm_tasks_per_node(text, "SLURM_STEP_TASKS_PER_NODE");
}

std::string hostlist_error(const std::string& text) {
  try {
    hosts(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError for the host list '" << text << "'");
  return "";
}

std::string tasks_error(const std::string& text) {
  try {
    tasks(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError for the tasks per node '" << text << "'");
  return "";
}

std::string slurm_error(const EnvVars& env, const SlurmOptions& options = {}) {
  try {
    resolve_slurm(env, options);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError from resolve_slurm");
  return "";
}

SlurmOptions with_jobs(std::vector<std::pair<std::string, int>> jobs) {
  SlurmOptions options;
  options.jobs = std::move(jobs);
  return options;
}

// The step of TF's single-task-per-node tests: three nodes, one task each.
EnvVars three_nodes(const std::string& procid = "0") {
  return {{"SLURM_PROCID", procid},
          {"SLURM_STEP_NUM_TASKS", "3"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
          {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"}};
}

// The step of TF's multi-task tests: five tasks on three nodes, two on the first two.
EnvVars five_tasks(const std::string& procid) {
  return {{"SLURM_PROCID", procid},
          {"SLURM_STEP_NUM_TASKS", "5"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
          {"SLURM_STEP_NODELIST", "t02n13,t02n41,t02n43"},
          {"CUDA_VISIBLE_DEVICES", ""}};
}

TEST_CASE("Slurm host lists expand as Slurm writes them", "[config][slurm]") {
  CHECK(hosts("node[01-03,07]") == Strings{"node01", "node02", "node03", "node07"});
  CHECK(hosts("a[1-2],b,c[3]") == Strings{"a1", "a2", "b", "c3"});
  CHECK(hosts("rack[1-2]-node[01-02]") ==
        Strings{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"});
  CHECK(hosts("n[1-2]-ib") == Strings{"n1-ib", "n2-ib"});
  CHECK(hosts("n[1-2]-ib,login") == Strings{"n1-ib", "n2-ib", "login"});
  CHECK(hosts("n[8-10]") == Strings{"n8", "n9", "n10"});           // no padding from "8"
  CHECK(hosts("n[098-101]") == Strings{"n098", "n099", "n100", "n101"});
  CHECK(hosts("n[5]") == Strings{"n5"});
  CHECK(hosts("gpu-a100.cluster_1") == Strings{"gpu-a100.cluster_1"});
}

// TF's test_expand_hostlist, every assertion.
TEST_CASE("Slurm host lists: TF's test_expand_hostlist", "[config][slurm]") {
  CHECK(hosts("n1") == Strings{"n1"});
  CHECK(hosts("n[1,3]") == Strings{"n1", "n3"});
  CHECK(hosts("n[1-3]") == Strings{"n1", "n2", "n3"});
  CHECK(hosts("n[1-2],m5,o[3-4,6,7-9]") == Strings{"n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"});
  CHECK(hosts("n[0001-0003],m5,o[009-011]") ==
        Strings{"n0001", "n0002", "n0003", "m5", "o009", "o010", "o011"});
}

TEST_CASE("Slurm host lists: bad syntax names the variable and the text", "[config][slurm]") {
  const std::string example = "(expected hosts like 'node[01-03,07],login1')";
  struct Case {
    std::string text, why;
  };
  const std::vector<Case> cases = {
      {"node[1-2", "'[' has no closing ']'"},
      {"node1-2]", "']' without '['"},
      {"n[[1]]", "'[' inside brackets"},
      {"n[]", "empty brackets '[]'"},
      {"n[1,]", "empty range in '[1,]'"},
      {"n[-2]", "'-2' in '[-2]' is not a number or a range like 1-3"},
      {"n[1-]", "'1-' in '[1-]' is not a number or a range like 1-3"},
      {"n[3-1]", "the range '3-1' goes down"},
      {"n[a-b]", "'a-b' in '[a-b]' is not a number or a range like 1-3"},
      {"n[1-2-3]", "'1-2-3' in '[1-2-3]' is not a number or a range like 1-3"},
      {"n[1-9999999999]", "is not a number"},
      {"a,,b", "an empty host name"},
      {",a", "an empty host name"},
      {"a,", "an empty host name"},
      {"", "the list is empty"},
      {"n 1", "' ' is not allowed in a host name"},
      {"n[0-99999999]", "more than 1048576 hosts"},
      {"r[0-9999]-n[0-9999]", "it expands to more than 1048576 hosts"},
  };
  for (const Case& c : cases) {
    INFO("host list '" << c.text << "'");
    const std::string message = hostlist_error(c.text);
    CHECK_THAT(message, Contains("SLURM_STEP_NODELIST='" + c.text + "': cannot parse the host list"));
    CHECK_THAT(message, Contains(c.why));
    CHECK_THAT(message, Contains(example));
  }
}

TEST_CASE("Slurm tasks per node expand their repeats", "[config][slurm]") {
  CHECK(tasks("4") == std::vector<int>{4});
  CHECK(tasks("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(tasks("1(x1)") == std::vector<int>{1});
}

// TF's test_expand_tasks_per_node, every assertion.
TEST_CASE("Slurm tasks per node: TF's test_expand_tasks_per_node", "[config][slurm]") {
  CHECK(tasks("2") == std::vector<int>{2});
  CHECK(tasks("2,1,3") == std::vector<int>{2, 1, 3});
  CHECK(tasks("3(x2),2,1") == std::vector<int>{3, 3, 2, 1});
  CHECK(tasks("3(x2),2,11(x4)") == std::vector<int>{3, 3, 2, 11, 11, 11, 11});
  CHECK(tasks("13(x10)") == std::vector<int>(10, 13));
}

TEST_CASE("Slurm tasks per node: bad syntax names the variable and the text", "[config][slurm]") {
  CHECK(tasks_error("2(x") ==
        "SLURM_STEP_TASKS_PER_NODE='2(x': cannot parse '2(x': a repeat is written '(xN)' "
        "(expected counts like '2(x3),1')");
  for (const std::string text : {"", "2,", "a", "2(3)", "2(x)", "2(x3", "(x3)", "2(x3)x", "-1", "0",
                                 "2(x0)", "1(x9999999)"}) {
    INFO("tasks per node '" << text << "'");
    const std::string message = tasks_error(text);
    CHECK_THAT(message, Contains("SLURM_STEP_TASKS_PER_NODE='" + text + "': cannot parse"));
    CHECK_THAT(message, Contains("(expected counts like '2(x3),1')"));
  }
}

// TF's testSimpleRetrievalFromEnv: no jobs given, so every task is a worker; TF's
// master("worker", 0) is the chief's address. (Its num_accelerators() check reads
// CUDA_VISIBLE_DEVICES, which is the devices module's business, not the resolver's.)
TEST_CASE("Slurm: TF's testSimpleRetrievalFromEnv", "[config][slurm]") {
  EnvVars env = three_nodes("0");
  env["CUDA_VISIBLE_DEVICES"] = "0";
  const ClusterConfig config = resolve_slurm(env, {});
  CHECK(config.spec.tasks ==
        std::map<std::string, Strings>{{"worker", {"t02n13:8888", "t02n41:8888", "t02n43:8888"}}});
  CHECK(config.spec.chief() == TaskId{"worker", 0});
  CHECK(config.spec.address(config.spec.chief()) == "t02n13:8888");
  CHECK(config.task == TaskId{"worker", 0});
  CHECK(config.source == "slurm");
  CHECK(config.local_rank == 0);
}

// TF's testSimpleSuccessfulRetrieval. TF passes tasks_per_node=1 and leaves
// SLURM_STEP_TASKS_PER_NODE unset; dtrain has no such option and reads the step's
// variable, so the same layout is given as SLURM_STEP_TASKS_PER_NODE='1(x3)'.
TEST_CASE("Slurm: TF's testSimpleSuccessfulRetrieval", "[config][slurm]") {
  const ClusterConfig config = resolve_slurm(three_nodes("0"), with_jobs({{"ps", 1}, {"worker", 2}}));
  CHECK(config.spec.tasks == std::map<std::string, Strings>{{"ps", {"t02n13:8888"}},
                                                            {"worker", {"t02n41:8888", "t02n43:8888"}}});
  CHECK(config.task == TaskId{"ps", 0});  // SLURM_PROCID 0 is the first task: the ps
}

// TF's testSimpleMasterRetrieval (tasks_per_node=1 as above): master() of worker 1
// and of ps 0 are those tasks' addresses (the rpc_layer prefixes are TF's only).
TEST_CASE("Slurm: TF's testSimpleMasterRetrieval", "[config][slurm]") {
  const ClusterConfig config = resolve_slurm(three_nodes("0"), with_jobs({{"ps", 1}, {"worker", 2}}));
  CHECK(config.spec.address({"worker", 1}) == "t02n43:8888");
  CHECK(config.spec.address({"ps", 0}) == "t02n13:8888");
}

// TF's testTaskPerNodeNotSetRetrieval: the layout from SLURM_STEP_TASKS_PER_NODE.
TEST_CASE("Slurm: TF's testTaskPerNodeNotSetRetrieval", "[config][slurm]") {
  const ClusterConfig config = resolve_slurm(three_nodes("0"), with_jobs({{"ps", 1}, {"worker", 2}}));
  CHECK(config.spec.tasks == std::map<std::string, Strings>{{"ps", {"t02n13:8888"}},
                                                            {"worker", {"t02n41:8888", "t02n43:8888"}}});
  CHECK(config.task == TaskId{"ps", 0});
}

// TF's testMultiTaskPerNodeRetrieval and testMultipleGpusPerTaskRetrieval: SLURM_PROCID
// 1 is the second task on t02n13, so worker:0 at port 8889. TF then sets
// CUDA_VISIBLE_DEVICES to '1' (one GPU per task) or '2,3' (two per task); dtrain's
// part of both is local_rank 1, from which the runtime picks the GPU.
TEST_CASE("Slurm: TF's testMultiTaskPerNodeRetrieval and testMultipleGpusPerTaskRetrieval", "[config][slurm]") {
  const ClusterConfig config = resolve_slurm(five_tasks("1"), with_jobs({{"ps", 1}, {"worker", 4}}));
  CHECK(config.spec.tasks ==
        std::map<std::string, Strings>{
            {"ps", {"t02n13:8888"}},
            {"worker", {"t02n13:8889", "t02n41:8888", "t02n41:8889", "t02n43:8888"}}});
  CHECK(config.task == TaskId{"worker", 0});
  CHECK(config.local_rank == 1);
}

TEST_CASE("Slurm: every task of a step finds itself", "[config][slurm]") {
  const std::vector<TaskId> expected = {{"ps", 0}, {"worker", 0}, {"worker", 1}, {"worker", 2}, {"worker", 3}};
  const std::vector<int> local = {0, 1, 0, 1, 0};
  for (int rank = 0; rank < 5; ++rank) {
    const ClusterConfig config =
        resolve_slurm(five_tasks(std::to_string(rank)), with_jobs({{"ps", 1}, {"worker", 4}}));
    CHECK(config.task == expected[static_cast<size_t>(rank)]);
    CHECK(config.local_rank == local[static_cast<size_t>(rank)]);
  }
}

TEST_CASE("Slurm: jobs keep the caller's order, hosts keep Slurm's", "[config][slurm]") {
  // TF sorts both by name; dtrain gives the first tasks to the first job.
  EnvVars env = three_nodes("2");
  env["SLURM_STEP_NODELIST"] = "n[9-11]";
  const ClusterConfig config = resolve_slurm(env, with_jobs({{"worker", 2}, {"ps", 1}}));
  CHECK(config.spec.tasks ==
        std::map<std::string, Strings>{{"worker", {"n9:8888", "n10:8888"}}, {"ps", {"n11:8888"}}});
  CHECK(config.task == TaskId{"ps", 0});
  CHECK(config.spec.chief() == TaskId{"worker", 0});
}

TEST_CASE("Slurm: port base, SLURM_LOCALID, SLURMD_NODENAME and the job id", "[config][slurm]") {
  EnvVars env = five_tasks("3");
  env["SLURM_LOCALID"] = "1";
  env["SLURMD_NODENAME"] = "t02n41";
  env["SLURM_JOB_ID"] = "4242";
  env["SLURM_STEP_ID"] = "0";
  SlurmOptions options;
  options.port_base = 20000;
  const ClusterConfig config = resolve_slurm(env, options);
  CHECK(config.spec.tasks.at("worker") ==
        Strings{"t02n13:20000", "t02n13:20001", "t02n41:20000", "t02n41:20001", "t02n43:20000"});
  CHECK(config.task == TaskId{"worker", 3});
  CHECK(config.local_rank == 1);
  CHECK(config.job_id == "slurm-4242.0");

  env.erase("SLURM_STEP_ID");
  CHECK(resolve_slurm(env, {}).job_id == "slurm-4242");
  env.erase("SLURM_JOB_ID");
  CHECK(resolve_slurm(env, {}).job_id.empty());
}

TEST_CASE("Slurm: a chief among the jobs", "[config][slurm]") {
  const ClusterConfig config = resolve_slurm(three_nodes("1"), with_jobs({{"chief", 1}, {"worker", 2}}));
  CHECK(config.spec.chief() == TaskId{"chief", 0});
  CHECK(config.spec.address({"chief", 0}) == "t02n13:8888");
  CHECK(config.task == TaskId{"worker", 0});
}

TEST_CASE("Slurm: a missing variable names it and says where to run", "[config][slurm]") {
  for (const std::string name :
       {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"}) {
    EnvVars env = three_nodes();
    env.erase(name);
    CHECK(slurm_error(env) == name +
                                  " is not set: run dtrain inside a Slurm step (srun), or choose "
                                  "runtime.cluster_resolver");
  }
}

TEST_CASE("Slurm: errors name the variable, its value and a fix", "[config][slurm]") {
  EnvVars env = three_nodes("x");
  CHECK_THAT(slurm_error(env), Contains("SLURM_PROCID='x': expected a whole number >= 0"));

  env = three_nodes("3");
  CHECK_THAT(slurm_error(env), Contains("SLURM_PROCID='3' is not below SLURM_STEP_NUM_TASKS='3'"));

  env = three_nodes();
  env["SLURM_STEP_NUM_TASKS"] = "4";
  CHECK_THAT(slurm_error(env),
             Contains("SLURM_STEP_NUM_TASKS='4' but SLURM_STEP_NODELIST='t02n13,t02n41,t02n43' and "
                      "SLURM_STEP_TASKS_PER_NODE='1(x3)' place 3 tasks"));

  env = three_nodes();
  env["SLURM_STEP_TASKS_PER_NODE"] = "1(x2)";
  CHECK_THAT(slurm_error(env), Contains("SLURM_STEP_TASKS_PER_NODE='1(x2)' disagree: 3 hosts but 2 task counts"));

  env = three_nodes();
  env["SLURM_STEP_NODELIST"] = "t02n13,t02n13,t02n43";
  CHECK_THAT(slurm_error(env), Contains("SLURM_STEP_NODELIST='t02n13,t02n13,t02n43' names a host twice"));

  env = three_nodes();
  env["SLURM_STEP_NODELIST"] = "t02n[13";
  CHECK_THAT(slurm_error(env), Contains("SLURM_STEP_NODELIST='t02n[13': cannot parse the host list"));

  env = three_nodes();
  env["SLURM_STEP_TASKS_PER_NODE"] = "1(x";
  CHECK_THAT(slurm_error(env), Contains("SLURM_STEP_TASKS_PER_NODE='1(x': cannot parse"));
}

TEST_CASE("Slurm: a task placed otherwise than in blocks is an error", "[config][slurm]") {
  // srun --distribution=cyclic puts task 1 on the second node as its first task.
  EnvVars env = five_tasks("1");
  env["SLURM_LOCALID"] = "0";
  std::string message = slurm_error(env);
  CHECK_THAT(message, Contains("SLURM_LOCALID='0' but the block layout of SLURM_STEP_NODELIST="));
  CHECK_THAT(message, Contains("puts task 1 (SLURM_PROCID) on t02n13 as its task 1"));
  CHECK_THAT(message, Contains("--distribution=block"));

  env = five_tasks("1");
  env["SLURMD_NODENAME"] = "t02n41";
  message = slurm_error(env);
  CHECK_THAT(message, Contains("SLURMD_NODENAME='t02n41' but the block layout"));
  CHECK_THAT(message, Contains("--distribution=block"));
}

TEST_CASE("Slurm: runtime.slurm_jobs must fit the step", "[config][slurm]") {
  CHECK(slurm_error(three_nodes(), with_jobs({{"ps", 1}, {"worker", 3}})) ==
        "runtime.slurm_jobs {\"ps\": 1, \"worker\": 3} asks for 4 tasks but the Slurm step has 3 "
        "(SLURM_STEP_NUM_TASKS='3'): make the counts add up to 3, or run srun with --ntasks=4");
  CHECK_THAT(slurm_error(three_nodes(), with_jobs({{"workers", 3}})),
             Contains("runtime.slurm_jobs {\"workers\": 3}: unknown task type 'workers'; did you mean 'worker'?"));
  CHECK_THAT(slurm_error(three_nodes(), with_jobs({{"worker", 1}, {"worker", 2}})),
             Contains("runtime.slurm_jobs {\"worker\": 1, \"worker\": 2}: 'worker' appears twice"));
  CHECK_THAT(slurm_error(three_nodes(), with_jobs({{"ps", 0}, {"worker", 3}})),
             Contains("runtime.slurm_jobs {\"ps\": 0, \"worker\": 3}: 'ps' has 0 tasks"));
  CHECK_THAT(slurm_error(three_nodes(), with_jobs({{"chief", 2}, {"worker", 1}})),
             Contains("runtime.slurm_jobs {\"chief\": 2, \"worker\": 1}: a cluster has at most one chief"));
  CHECK_THAT(slurm_error(three_nodes(), with_jobs({{"ps", 3}})),
             Contains("runtime.slurm_jobs {\"ps\": 3}: a cluster needs a chief or at least one worker"));
}

TEST_CASE("Slurm: the port base must leave room for a node's tasks", "[config][slurm]") {
  SlurmOptions options;
  options.port_base = 65535;
  CHECK_THAT(slurm_error(five_tasks("0"), options),
             Contains("runtime.port_base: ports 65535..65536 (2 tasks on a node) must lie within 1..65535"));
  options.port_base = 0;
  CHECK_THAT(slurm_error(five_tasks("0"), options), Contains("runtime.port_base: ports 0..1"));
}

// Found by tests/fuzz/fuzz_slurm.cpp (the sum by review, then run through it).
TEST_CASE("Slurm: task counts whose sum passes 2^31 are an error, not an overflow", "[config][slurm]") {
  // 3 x 999999999 overflowed the int that summed the counts (UBSan: signed integer overflow).
  const EnvVars env = {{"SLURM_PROCID", "0"},
                       {"SLURM_STEP_NUM_TASKS", "5"},
                       {"SLURM_STEP_TASKS_PER_NODE", "999999999(x3)"},
                       {"SLURM_STEP_NODELIST", "n1,n2,n3"}};
  CHECK_THAT(slurm_error(env), Contains("SLURM_STEP_NUM_TASKS='5' but") && Contains("place 2999999997 tasks"));
  EnvVars many = env;
  many["SLURM_STEP_NUM_TASKS"] = "2999999";
  CHECK_THAT(slurm_error(many), Contains("SLURM_STEP_NUM_TASKS='2999999' is more tasks than one dtrain job runs"));
}

TEST_CASE("Slurm: variables are quoted escaped in errors", "[config][slurm]") {
  CHECK_THAT(hostlist_error("n[1-2],\x01x"), Contains("SLURM_STEP_NODELIST='n[1-2],\\x01x'") &&
                                                 Contains("'\\x01' is not allowed in a host name"));
  CHECK_THAT(tasks_error("2\xff"), Contains("SLURM_STEP_TASKS_PER_NODE='2\\xff': cannot parse '2\\xff'"));
  EnvVars env = three_nodes();
  env["SLURM_PROCID"] = "0\n";
  CHECK_THAT(slurm_error(env), Contains("SLURM_PROCID='0\\n': expected a whole number"));
  env = three_nodes();
  env["SLURMD_NODENAME"] = "t02n13\x1b";
  CHECK_THAT(slurm_error(env), Contains("SLURMD_NODENAME='t02n13\\x1b' but"));
}

}  // namespace
}  // namespace dtrain::config
