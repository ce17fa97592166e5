// Tests of the cluster config: TensorFlow's TF_CONFIG examples, ClusterSpec queries,
// the precedence of --task, TF_CONFIG and the job file, every cluster error (each
// must name the JSON path and a fix), the new runtime keys and agreement_json.
#include <catch2/catch.hpp>

#include "job/job_config.h"
#include "config_test_util.h"
#include "core/strings.h"

namespace dtrain::config::test {
namespace {

// TensorFlow's documentation examples, verbatim.
const char* const kTfDocTwoWorkers =
    R"({"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 0}})";
const char* const kTfDocChiefWorkersPs =
    R"({"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222", "host3:2222"], "ps": ["host4:2222", "host5:2222"]}, "task": {"type": "chief", "index": 0}})";

// minimal_job() with `cluster` (and `task` when given) as JSON text.
json job_with_cluster(const std::string& cluster, const std::string& task = "") {
  json job = minimal_job();
  job["cluster"] = json::parse(cluster);
  if (!task.empty()) job["task"] = json::parse(task);
  return job;
}

ClusterConfig resolve(const json& job, const char* tf_config = nullptr,
                      const std::string& task_flag = "") {
  return resolve_cluster(parse(job).file_cluster(), tf_config, task_flag);
}

// The ConfigError message of resolve_cluster.
std::string resolve_error(const json& job, const char* tf_config,
                          const std::string& task_flag = "") {
  const JobConfig config = parse(job);
  try {
    resolve_cluster(config.file_cluster(), tf_config, task_flag);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError from resolve_cluster with TF_CONFIG "
       << (tf_config ? tf_config : "unset") << " and --task '" << task_flag << "'");
  return "";
}

// The ConfigError message of TF_CONFIG `tf` alone (no cluster in the file).
std::string tf_error(const std::string& tf, const std::string& task_flag = "") {
  return resolve_error(minimal_job(), tf.c_str(), task_flag);
}

std::string cluster_error(const std::string& cluster) {
  return config_error(job_with_cluster(cluster));
}

std::string flag_error(const std::string& text) {
  try {
    parse_task_flag(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError for --task " << text);
  return "";
}

TEST_CASE("TF's two-worker TF_CONFIG example is accepted verbatim", "[config][cluster]") {
  const ClusterConfig c = resolve(minimal_job(), kTfDocTwoWorkers);
  CHECK_FALSE(c.single_process());
  CHECK(c.source == "TF_CONFIG");
  CHECK(c.task == TaskId{"worker", 0});
  CHECK(c.spec.count("worker") == 2);
  CHECK(c.spec.count("chief") == 0);
  CHECK(c.spec.address({"worker", 1}) == "localhost:23456");
  CHECK(c.spec.chief() == TaskId{"worker", 0});
  CHECK(c.spec.world_size() == 2);
  CHECK(c.spec.rank({"worker", 0}) == 0);
  CHECK(c.spec.rank({"worker", 1}) == 1);
}

TEST_CASE("TF's chief/worker/ps TF_CONFIG example is accepted verbatim", "[config][cluster]") {
  const ClusterConfig c = resolve(minimal_job(), kTfDocChiefWorkersPs);
  const ClusterSpec& s = c.spec;
  CHECK(c.task == TaskId{"chief", 0});
  CHECK(s.world_size() == 4);
  CHECK(s.chief() == TaskId{"chief", 0});
  CHECK(s.rank({"chief", 0}) == 0);
  CHECK(s.rank({"worker", 0}) == 1);
  CHECK(s.rank({"worker", 2}) == 3);
  CHECK(s.rank({"ps", 1}) == -1);
  CHECK(s.contains({"ps", 1}));
  CHECK_FALSE(s.contains({"ps", 2}));
  CHECK_FALSE(s.contains({"evaluator", 0}));
  CHECK(s.count("ps") == 2);
  const std::vector<TaskId> expected = {{"chief", 0},  {"worker", 0}, {"worker", 1},
                                        {"worker", 2}, {"ps", 0},     {"ps", 1}};
  CHECK(s.all_tasks() == expected);
  CHECK(s.address({"ps", 0}) == "host4:2222");
}

TEST_CASE("the same cluster can be given in the job file", "[config][cluster]") {
  const json job = job_with_cluster(R"({"chief": ["host0:2222"], "worker": ["host1:2222"],
                                        "evaluator": ["host9:2222"]})",
                                    R"({"type": "worker", "index": 0})");
  const JobConfig config = parse(job);
  CHECK(config.cluster.count("chief") == 1);
  REQUIRE(config.task.has_value());
  CHECK(*config.task == TaskId{"worker", 0});
  const ClusterConfig c = resolve_cluster(config.file_cluster(), nullptr, "");
  CHECK(c.source == "job.json");
  CHECK(c.task == TaskId{"worker", 0});
  CHECK(c.spec.all_tasks().back() == TaskId{"evaluator", 0});
  CHECK(c.spec.rank({"evaluator", 0}) == -1);
}

TEST_CASE("no cluster anywhere is a single process", "[config][cluster]") {
  const ClusterConfig c = resolve(minimal_job(), nullptr, "");
  CHECK(c.single_process());
  CHECK(c.spec.empty());
  CHECK(resolve(minimal_job(), "", "").single_process());  // TF_CONFIG set but empty
  CHECK(resolve(minimal_job(), "{}", "").single_process());
}

TEST_CASE("empty task lists are accepted and hold no task", "[config][cluster]") {
  const ClusterConfig c = resolve(
      minimal_job(), R"({"cluster": {"worker": ["a:1"], "ps": []}, "task": {"type": "worker"}})");
  CHECK(c.spec.count("ps") == 0);
  CHECK(c.spec.all_tasks().size() == 1);
  CHECK(c.task == TaskId{"worker", 0});  // TF: a missing index is 0
  CHECK_THAT(
      tf_error(R"({"cluster": {"worker": ["a:1"], "ps": []}, "task": {"type": "ps", "index": 0}})"),
      Contains("TF_CONFIG.task.type: the cluster has no ps tasks (it has worker)"));
}

TEST_CASE("the task comes from --task, else TF_CONFIG, else the file", "[config][cluster]") {
  const json job =
      job_with_cluster(R"({"worker": ["a:1", "b:1", "c:1"]})", R"({"type": "worker", "index": 0})");
  const std::string tf =
      R"({"cluster": {"worker": ["a:1", "b:1", "c:1"]}, "task": {"type": "worker", "index": 1}})";
  CHECK(resolve(job, nullptr, "").task == TaskId{"worker", 0});
  CHECK(resolve(job, tf.c_str(), "").task == TaskId{"worker", 1});
  CHECK(resolve(job, tf.c_str(), "worker:2").task == TaskId{"worker", 2});
  CHECK(resolve(job, nullptr, "worker:2").task == TaskId{"worker", 2});
  // A TF_CONFIG with only a task picks the task within the file's cluster.
  const ClusterConfig c = resolve(job, R"({"task": {"type": "worker", "index": 2}})");
  CHECK(c.task == TaskId{"worker", 2});
  CHECK(c.source == "job.json");
  // A file with only a task, the cluster from TF_CONFIG.
  json task_only = minimal_job();
  task_only["task"] = {{"type", "worker"}, {"index", 1}};
  const ClusterConfig d = resolve(task_only, R"({"cluster": {"worker": ["a:1", "b:1"]}})");
  CHECK(d.source == "TF_CONFIG");
  CHECK(d.task == TaskId{"worker", 1});
}

TEST_CASE("the same cluster in the file and TF_CONFIG is fine, different is an error",
          "[config][cluster]") {
  const json job = job_with_cluster(R"({"worker": ["Host1:02222", "host2:2222"], "ps": []})");
  // Equal after normalising (host case, leading zeros, empty lists).
  CHECK(
      resolve(job, R"({"cluster": {"worker": ["host1:2222", "host2:2222"]}})", "worker:1").source ==
      "job.json");
  const std::string e =
      resolve_error(job, R"({"cluster": {"worker": ["host1:2222", "host3:2222"]}})", "worker:1");
  CHECK_THAT(e, Contains("job.json: cluster: job.json and TF_CONFIG give different clusters "
                         "(worker:1 is 'host2:2222' in job.json and 'host3:2222' in TF_CONFIG)"));
  CHECK_THAT(e, Contains("job.json has {\"worker\": [\"Host1:02222\", \"host2:2222\"]}"));
  CHECK_THAT(e, Contains("TF_CONFIG has {\"worker\": [\"host1:2222\", \"host3:2222\"]}"));
  CHECK_THAT(e, Contains("remove \"cluster\" from job.json or unset TF_CONFIG"));
  CHECK_THAT(resolve_error(job, R"({"cluster": {"worker": ["host1:2222"]}})", "worker:0"),
             Contains("job.json has 2 worker addresses and TF_CONFIG has 1"));
}

TEST_CASE("a cluster without a task says how to give one", "[config][cluster]") {
  const std::string e = tf_error(R"({"cluster": {"chief": ["h0:1"], "worker": ["h1:1"]}})");
  CHECK_THAT(
      e, Contains("the cluster (from TF_CONFIG, 2 tasks) does not say which task this process is"));
  CHECK_THAT(e, Contains("--task TYPE:INDEX (e.g. --task chief:0)"));
  CHECK_THAT(e, Contains("TF_CONFIG's \"task\""));
  CHECK_THAT(e, Contains("\"task\" in job.json"));
}

TEST_CASE("a task without a cluster is an error", "[config][cluster]") {
  CHECK_THAT(tf_error(R"({"task": {"type": "worker", "index": 0}})"),
             Contains("TF_CONFIG.task: the task worker:0 is given but there is no cluster; add "
                      "\"cluster\""));
  CHECK_THAT(resolve_error(minimal_job(), nullptr, "worker:1"),
             Contains("--task worker:1: the task worker:1 is given but there is no cluster"));
  json job = minimal_job();
  job["task"] = {{"type", "chief"}, {"index", 0}};
  CHECK_THAT(resolve_error(job, nullptr), Contains("job.json: task: the task chief:0 is given"));
}

TEST_CASE("the task must be in the cluster", "[config][cluster]") {
  const std::string tf = R"({"cluster": {"worker": ["a:1", "b:1"]}})";
  CHECK_THAT(tf_error(tf, "worker:2"),
             Contains("--task worker:2: worker:2 is not in the cluster: TF_CONFIG.cluster.worker "
                      "has 2 addresses (worker:0 to worker:1); use an index from 0 to 1"));
  CHECK_THAT(
      tf_error(
          R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 5}})"),
      Contains("TF_CONFIG.task.index: worker:5 is not in the cluster"));
  CHECK_THAT(tf_error(tf, "chief:0"),
             Contains("--task chief:0: the cluster has no chief tasks (it has worker); pick one of "
                      "its tasks, or add the address to TF_CONFIG.cluster.chief"));
  // In the file, the task is checked against the file's cluster when both are there.
  CHECK_THAT(
      config_error(job_with_cluster(R"({"worker": ["a:1"]})", R"({"type": "worker", "index": 1})")),
      Contains("job.json: task.index: worker:1 is not in the cluster: cluster.worker in "
               "job.json has 1 address (worker:0 to worker:0)"));
}

TEST_CASE("TF1's worker_hosts and ps_hosts get a suggestion and a note", "[config][cluster]") {
  const std::string e = cluster_error(R"({"worker_hosts": ["a:1"], "ps_hosts": ["b:1"]})");
  CHECK_THAT(
      e, Contains("job.json: cluster.ps_hosts: unknown task type 'ps_hosts'; did you mean 'ps'?"));
  CHECK_THAT(e, Contains("TF_CONFIG uses lists under \"cluster\""));
  CHECK_THAT(tf_error(R"({"cluster": {"worker_hosts": ["a:1"]}})"),
             Contains("TF_CONFIG.cluster.worker_hosts: unknown task type 'worker_hosts'; did you "
                      "mean 'worker'?"));
  CHECK_THAT(cluster_error(R"({"workers": ["a:1"]})"),
             Contains("cluster.workers: unknown task type 'workers'; did you mean 'worker'? "
                      "(valid: chief, worker, ps, evaluator)"));
  CHECK_THAT(cluster_error(R"({"master": ["a:1"]})"), Contains("did you mean 'chief'?"));
}

TEST_CASE("at most one chief and one evaluator", "[config][cluster]") {
  CHECK_THAT(cluster_error(R"({"chief": ["a:1", "b:1"]})"),
             Contains("job.json: cluster.chief: a cluster has at most one chief, got 2 addresses"));
  CHECK_THAT(cluster_error(R"({"chief": ["a:1", "b:1"]})"),
             Contains("list the others under \"worker\""));
  CHECK_THAT(tf_error(R"({"cluster": {"worker": ["w:1"], "evaluator": ["a:1", "b:1"]}})"),
             Contains("TF_CONFIG.cluster.evaluator: a cluster has at most one evaluator"));
}

TEST_CASE("a cluster needs a chief or a worker", "[config][cluster]") {
  CHECK_THAT(cluster_error(R"({"ps": ["a:1"]})"),
             Contains("job.json: cluster: a cluster needs a chief or at least one worker"));
  CHECK_THAT(cluster_error(R"({"ps": ["a:1"]})"), Contains("add \"worker\""));
}

TEST_CASE("addresses must be host:port", "[config][cluster]") {
  CHECK_THAT(cluster_error(R"({"worker": ["a:1", "b:1", "host3"]})"),
             Contains("job.json: cluster.worker[2]: 'host3' is not host:port: the port is missing "
                      "(e.g. \"host3:2222\")"));
  CHECK_THAT(tf_error(R"({"cluster": {"worker": ["a:1", "b:1", "host3"]}})"),
             Contains("TF_CONFIG.cluster.worker[2]: 'host3' is not host:port"));
  CHECK_THAT(
      cluster_error(R"({"worker": ["host:http"]})"),
      Contains("cluster.worker[0]: 'host:http' is not host:port: the port 'http' is not a number"));
  CHECK_THAT(
      cluster_error(R"({"worker": ["host:70000"]})"),
      Contains("cluster.worker[0]: 'host:70000' is not host:port: port 70000 is outside 1..65535"));
  CHECK_THAT(cluster_error(R"({"worker": ["host:0"]})"), Contains("port 0 is outside 1..65535"));
  CHECK_THAT(cluster_error(R"({"worker": [":2222"]})"), Contains("the host is empty"));
  CHECK_THAT(cluster_error(R"({"worker": ["host:"]})"), Contains("the port after ':' is missing"));
  CHECK_THAT(cluster_error(R"({"worker": ["::1:2222"]})"),
             Contains("an IPv6 address needs brackets: \"[::1]:2222\""));
  CHECK_THAT(cluster_error(R"({"worker": ["my host:2222"]})"), Contains("contains ' '"));
  CHECK_THAT(cluster_error(R"({"worker": [2222]})"),
             Contains("cluster.worker[0]: expected a \"host:port\" string such as \"host1:2222\", "
                      "got 2222 (a number)"));
  CHECK_THAT(cluster_error(R"({"worker": "a:1"})"),
             Contains("cluster.worker: expected an array of \"host:port\" strings"));
  CHECK_THAT(cluster_error(R"(["a:1"])"),
             Contains("job.json: cluster: expected an object mapping task types"));
}

TEST_CASE("IPv6 addresses in brackets are accepted", "[config][cluster]") {
  const ClusterConfig c =
      resolve(minimal_job(), R"({"cluster": {"worker": ["[::1]:2222", "[fe80::1]:2223"]},
                                                     "task": {"type": "worker", "index": 1}})");
  CHECK(c.spec.address({"worker", 0}) == "[::1]:2222");
  const HostPort hp = parse_host_port("[::1]:2222", "test");
  CHECK(hp.host == "::1");
  CHECK(hp.port == 2222);
  const HostPort v4 = parse_host_port("10.0.0.1:80", "test");
  CHECK(v4.host == "10.0.0.1");
  CHECK(v4.port == 80);
  CHECK_THAT(cluster_error(R"({"worker": ["[::1]"]})"), Contains("the port is missing"));
  CHECK_THAT(cluster_error(R"({"worker": ["[::1:2222"]})"), Contains("no closing ']'"));
  CHECK_THAT(cluster_error(R"({"worker": ["[host]:2222"]})"), Contains("is not an IPv6 address"));
  try {
    parse_host_port("nohost", "--peer");
    FAIL("expected a ConfigError");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Contains("--peer: 'nohost' is not host:port"));
  }
}

TEST_CASE("a duplicate address names both tasks", "[config][cluster]") {
  CHECK_THAT(cluster_error(R"({"chief": ["h:1"], "worker": ["a:1", "h:1"]})"),
             Contains("job.json: cluster.worker[1]: 'h:1' is the address of both chief:0 "
                      "(cluster.chief[0]) and worker:1; every task needs its own host:port"));
  CHECK_THAT(tf_error(R"({"cluster": {"worker": ["a:1", "A:001"]}})"),
             Contains("TF_CONFIG.cluster.worker[1]: 'A:001' is the address of both worker:0"));
  // The same host on different ports is fine.
  CHECK(
      resolve(minimal_job(), R"({"cluster": {"worker": ["h:1", "h:2"]}})", "worker:1").task.index ==
      1);
}

TEST_CASE("task.type and task.index are checked", "[config][cluster]") {
  const std::string cluster = R"("cluster": {"worker": ["a:1", "b:1"]})";
  CHECK_THAT(tf_error(str("{", cluster, R"(, "task": {"type": "worker", "index": "1"}})")),
             Contains("TF_CONFIG.task.index: expected an integer, got \"1\" (a string); write it "
                      "without quotes: \"index\": 1"));
  CHECK_THAT(tf_error(str("{", cluster, R"(, "task": {"type": "worker", "index": -1}})")),
             Contains("TF_CONFIG.task.index: must be an integer >= 0, got -1"));
  CHECK_THAT(tf_error(str("{", cluster, R"(, "task": {"type": "worker", "index": 1.5}})")),
             Contains("TF_CONFIG.task.index: expected an integer >= 0, got 1.5 (not an integer)"));
  CHECK_THAT(tf_error(str("{", cluster, R"(, "task": {"type": "wroker", "index": 0}})")),
             Contains("TF_CONFIG.task.type: unknown task type 'wroker'; did you mean 'worker'?"));
  CHECK_THAT(
      tf_error(str("{", cluster, R"(, "task": {"index": 0}})")),
      Contains("TF_CONFIG.task: the task needs 'type' (one of chief, worker, ps, evaluator)"));
  CHECK_THAT(tf_error(str("{", cluster, R"(, "task": {"type": "worker", "idx": 0}})")),
             Contains("TF_CONFIG.task: unknown key 'idx' for the task; did you mean 'index'?"));
  CHECK_THAT(config_error(
                 job_with_cluster(R"({"worker": ["a:1"]})", R"({"type": "worker", "index": "0"})")),
             Contains("job.json: task.index: expected an integer"));
}

TEST_CASE("malformed TF_CONFIG is reported at line:column", "[config][cluster]") {
  CHECK_THAT(tf_error(R"({"cluster": {"worker": ["a:1",]}})"),
             Contains("TF_CONFIG: malformed JSON at 1:"));
  CHECK_THAT(tf_error("{\n\"cluster\" {}}"), Contains("TF_CONFIG: malformed JSON at 2:"));
  CHECK_THAT(tf_error("[1]"), Contains("TF_CONFIG: expected a JSON object"));
  CHECK_THAT(tf_error(R"({"clustre": {}})"),
             Contains("TF_CONFIG: unknown top-level key 'clustre'; did you mean 'cluster'?"));
}

TEST_CASE("rpc_layer, environment and Cloud ML Engine keys are accepted", "[config][cluster]") {
  const ClusterConfig c = resolve(minimal_job(), R"({"cluster": {"worker": ["a:1"]},
      "task": {"type": "worker", "index": 0, "trial": "1"}, "rpc_layer": "grpc",
      "environment": "cloud", "job": {"args": []}})");
  CHECK(c.spec.rpc_layer == "grpc");
  CHECK(resolve(minimal_job(), R"({"cluster": {"worker": ["a:1"]}, "environment": "google"})",
                "worker:0")
            .task.type == "worker");
  json job = job_with_cluster(R"({"worker": ["a:1"]})");
  job["rpc_layer"] = "grpc";
  CHECK(parse(job).cluster.rpc_layer == "grpc");
  CHECK(resolve(job, nullptr, "worker:0").spec.rpc_layer == "grpc");
}

TEST_CASE("parse_task_flag reads TYPE:INDEX", "[config][cluster]") {
  CHECK(parse_task_flag("worker:1") == TaskId{"worker", 1});
  CHECK(parse_task_flag("chief:0").str() == "chief:0");
  CHECK_THAT(
      flag_error("worker"),
      Contains("--task worker: the index is missing; expected TYPE:INDEX, e.g. --task worker:1"));
  CHECK_THAT(flag_error("worker:x"),
             Contains("--task worker:x: the index 'x' is not an integer >= 0"));
  CHECK_THAT(flag_error("worker:-1"), Contains("the index '-1' is not an integer >= 0"));
  CHECK_THAT(flag_error("boss:0"),
             Contains("--task boss:0: unknown task type 'boss'; did you mean 'chief'?"));
  CHECK_THAT(flag_error("wrker:0"), Contains("did you mean 'worker'?"));
  CHECK_THAT(flag_error(":0"), Contains("the task type is missing"));
}

TEST_CASE("the runtime keys of the rendezvous are read and checked", "[config][cluster]") {
  json job = minimal_job();
  job["runtime"] = json::parse(R"({"rendezvous_timeout": 30, "heartbeat_interval": 0.5,
      "heartbeat_timeout": 5, "secret_file": "/etc/dtrain/secret", "job_id": "mnist-1"})");
  const JobConfig c = parse(job);
  CHECK(c.runtime.rendezvous_timeout == Approx(30));
  CHECK(c.runtime.heartbeat_interval == Approx(0.5));
  CHECK(c.runtime.heartbeat_timeout == Approx(5));
  CHECK(c.runtime.secret_file == "/etc/dtrain/secret");
  CHECK(c.runtime.job_id == "mnist-1");
  const JobConfig d = parse(minimal_job());
  CHECK(d.runtime.rendezvous_timeout == Approx(300));
  CHECK(d.runtime.heartbeat_timeout > d.runtime.heartbeat_interval);
  CHECK_THAT(
      config_error(minimal_job(), {"runtime.rendezvous_timeout=0"}),
      Contains(
          "job.json: runtime.rendezvous_timeout: must be a positive number of seconds, at most 1e7, got 0 (from --set"));
  // Past 1e7 s a deadline would overflow the clock's nanoseconds (1e10 used to time out at once).
  CHECK_THAT(config_error(minimal_job(), {"runtime.heartbeat_timeout=1e10"}),
             Contains("runtime.heartbeat_timeout: must be a positive number of seconds, at most 1e7, got 1"));
  CHECK_THAT(config_error(minimal_job(), {"runtime.heartbeat_timeout=0.5"}),
             Contains("runtime.heartbeat_timeout: must be greater than runtime.heartbeat_interval "
                      "(1), got 0.5"));
  CHECK_THAT(config_error(minimal_job(), {"runtime.heartbeat_interval=20"}),
             Contains("got the default 10"));
  CHECK(parse(minimal_job(), {"runtime.secret_file="}).runtime.secret_file.empty());
  CHECK_THAT(config_error(minimal_job(), {"runtime.secret_file=[]"}),
             Contains("runtime.secret_file: expected a string, got [] (an array)"));
  CHECK_THAT(config_error(minimal_job(), {"runtime.job_id=a b"}),
             Contains("runtime.job_id: 'a b' contains ' '"));
  CHECK_THAT(config_error(minimal_job(), {"runtime.heartbeat_intervall=2"}),
             Contains("did you mean 'heartbeat_interval'?"));
}

TEST_CASE("overrides with --set work for the new keys", "[config][cluster]") {
  const JobConfig c = parse(job_with_cluster(R"({"worker": ["a:1", "b:1"]})"),
                            {"runtime.rendezvous_timeout=5", "task.type=worker", "task.index=1",
                             "cluster.worker[1]=c:2"});
  CHECK(c.runtime.rendezvous_timeout == Approx(5));
  REQUIRE(c.task.has_value());
  CHECK(*c.task == TaskId{"worker", 1});
  CHECK(c.cluster.address({"worker", 1}) == "c:2");
  CHECK_THAT(config_error(minimal_job(), {"cluster.workers=[\"a:1\"]"}),
             Contains("cluster.workers: unknown task type 'workers'; did you mean 'worker'?"));
}

TEST_CASE("agreement_json ignores the task and runtime.threads only", "[config][cluster]") {
  json a = job_with_cluster(R"({"worker": ["a:1", "b:1"]})", R"({"type": "worker", "index": 0})");
  json b = a;
  b["task"]["index"] = 1;
  b["runtime"] = {{"threads", 4}};
  const JobConfig ca = parse(a);
  const JobConfig cb = parse(b);
  CHECK(ca.normalized_json != cb.normalized_json);
  CHECK(ca.agreement_json == cb.agreement_json);
  CHECK(parse(a, {"runtime.threads=2"}).agreement_json == ca.agreement_json);
  CHECK(ca.normalized_json.find("\"cluster\":{\"worker\":[\"a:1\",\"b:1\"]}") != std::string::npos);
  CHECK(ca.normalized_json.find("\"task\"") != std::string::npos);
  CHECK(ca.agreement_json.find("\"task\"") == std::string::npos);
  CHECK(parse(a, {"train.epochs=2"}).agreement_json != ca.agreement_json);
  CHECK(parse(a, {"runtime.heartbeat_timeout=20"}).agreement_json != ca.agreement_json);
  CHECK(parse(a, {"cluster.worker[1]=c:1"}).agreement_json != ca.agreement_json);
  b["runtime"]["job_id"] = "x";
  CHECK(parse(b).agreement_json != ca.agreement_json);
}

// Found by tests/fuzz/fuzz_tf_config.cpp: the --task flag, TF_CONFIG's keys and
// addresses went into messages raw (control characters, bytes that are not UTF-8).
TEST_CASE("TF_CONFIG and --task text is quoted escaped and cut short in errors", "[config][cluster]") {
  CHECK_THAT(flag_error("ps:1\xff"), Contains("--task ps:1\\xff: the index '1\\xff' is not an integer"));
  CHECK_THAT(flag_error("w\x1b[2Jorker:0"), Contains("unknown task type 'w\\x1b[2Jorker'"));
  CHECK_THAT(tf_error(R"({"cluster": {"wor\u0000ker": ["h:1"]}})"),
             Contains("TF_CONFIG.cluster.wor\\x00ker: unknown task type 'wor\\x00ker'"));
  CHECK_THAT(tf_error(R"({"cluster": {"worker": ["h\u0007st:1"]}})"),
             Contains("'h\\x07st:1' is not host:port: the host 'h\\x07st' contains '\\x07'"));
  const std::string e = tf_error(R"({"cluster": {"worker": [")" + std::string(500, 'h') + R"(:99999"]}})");
  CHECK_THAT(e, Contains("'" + std::string(80, 'h') + "...' is not host:port"));
  CHECK(e.size() < 400);
  // Malformed JSON quotes what it read: bytes that are not UTF-8 come out escaped.
  CHECK_THAT(tf_error("{\"cluster\": \xfe}"), Contains("TF_CONFIG: malformed JSON at 1:13") && Contains("\\xfe"));
}

}  // namespace
}  // namespace dtrain::config::test
