// lib/launch's planning: loopback checks, port reservations (free and fixed, a port in
// use), where the cluster comes from (--workers, the job file, TF_CONFIG with or
// without a task), the errors for non-local addresses and conflicting sources,
// --inject parsing, and the TF_CONFIG each task gets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "job/job_config.h"
#include "core/error.h"
#include "launch/cluster_plan.h"

using namespace dtrain;
using namespace dtrain::launch;
using Catch::Matchers::Contains;

namespace {

// A valid job; `extra` is spliced into the top-level object (e.g. a cluster).
config::FileCluster file_cluster_of(const std::string& extra = "") {
  const std::string text =
      R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 2}]},
          "loss": "sparse_categorical_crossentropy", "optimizer": "sgd", "train": {"epochs": 1},
          "data": {"train": {"format": "synthetic", "shape": [4], "count": 8, "classes": 2}})" +
      (extra.empty() ? "" : ", " + extra) + "}";
  return job::parse_job_config(text, "job.json").file_cluster();
}

int port_of(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

}  // namespace

TEST_CASE("loopback hosts", "[unit]") {
  for (const char* host : {"localhost", "LocalHost", "127.0.0.1", "127.1.2.3", "::1",
                           "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1"})
    CHECK(is_loopback_host(host));
  for (const char* host : {"10.0.0.1", "128.0.0.1", "host1", "localhost.example.com",
                           "::", "0.0.0.0", "::ffff:10.0.0.1", ""})
    CHECK_FALSE(is_loopback_host(host));
}

TEST_CASE("free ports are distinct and stay reserved", "[unit]") {
  ReservedPort a = reserve_free_port();
  ReservedPort b = reserve_free_port();
  CHECK(a.address.rfind("127.0.0.1:", 0) == 0);
  CHECK(a.address != b.address);
  // Nobody else can take a reserved port, SO_REUSEADDR or not.
  CHECK_THROWS_WITH(reserve_port(a.address, "127.0.0.1", port_of(a.address), "worker:3"),
                    Contains("worker:3") && Contains(a.address) && Contains("in use"));
}

TEST_CASE("a fixed port is bound on its host and localhost means 127.0.0.1", "[unit]") {
  ReservedPort probe = reserve_free_port();
  const int port = port_of(probe.address);
  probe.socket.reset();  // free again
  ReservedPort r = reserve_port("localhost:" + std::to_string(port), "localhost", port, "chief:0");
  REQUIRE(r.socket.valid());
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(r.socket.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  CHECK(ntohs(addr.sin_port) == port);
  CHECK(ntohl(addr.sin_addr.s_addr) == INADDR_LOOPBACK);
}

TEST_CASE("launching with --workers builds a localhost cluster on free ports", "[unit]") {
  ClusterRequest r;
  r.workers = 2;
  r.ps = 1;
  r.chief = true;
  r.evaluator = true;
  const ClusterPlan plan = plan_cluster(file_cluster_of(), r, nullptr);
  CHECK(plan.source == "--workers");
  REQUIRE(plan.tasks.size() == 5);
  const std::vector<std::string> order = {"chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"};
  std::set<std::string> addresses;
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    CHECK(plan.tasks[i].task.str() == order[i]);
    CHECK(plan.tasks[i].port.socket.valid());
    CHECK(plan.spec.address(plan.tasks[i].task) == plan.tasks[i].port.address);
    addresses.insert(plan.tasks[i].port.address);
  }
  CHECK(addresses.size() == 5);
  CHECK(plan.spec.chief().str() == "chief:0");
}

TEST_CASE("a requested cluster needs a chief or a worker and no cluster in the file", "[unit]") {
  ClusterRequest ps_only;
  ps_only.ps = 1;
  CHECK_THROWS_AS(plan_cluster(file_cluster_of(), ps_only, nullptr), ConfigError);
  ClusterRequest r;
  r.workers = 2;
  CHECK_THROWS_WITH(
      plan_cluster(file_cluster_of(R"("cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]})"), r, nullptr),
      Contains("job.json has a cluster") && Contains("worker:0, worker:1"));
}

TEST_CASE("the cluster comes from the job file or TF_CONFIG", "[unit]") {
  ReservedPort p0 = reserve_free_port(), p1 = reserve_free_port();
  const std::string a0 = p0.address, a1 = p1.address;
  p0.socket.reset();
  p1.socket.reset();
  const std::string cluster = R"({"worker": [")" + a0 + R"(", ")" + a1 + R"("]})";

  SECTION("the job file") {
    const ClusterPlan plan = plan_cluster(file_cluster_of(R"("cluster": )" + cluster), {}, nullptr);
    CHECK(plan.source == "job.json");
    REQUIRE(plan.tasks.size() == 2);
    CHECK(plan.tasks[1].port.address == a1);
  }
  SECTION("TF_CONFIG without a task") {
    const std::string tf = R"({"cluster": )" + cluster + "}";
    const ClusterPlan plan = plan_cluster(file_cluster_of(), {}, tf.c_str());
    CHECK(plan.source == "TF_CONFIG");
    CHECK(plan.tasks.size() == 2);
  }
  SECTION("TF_CONFIG with a task, and with only a chief") {
    const std::string tf =
        R"({"cluster": )" + cluster + R"(, "task": {"type": "worker", "index": 1}})";
    CHECK(plan_cluster(file_cluster_of(), {}, tf.c_str()).tasks.size() == 2);
    const std::string chief_only = R"({"cluster": {"chief": [")" + a0 + R"("]}})";
    CHECK(plan_cluster(file_cluster_of(), {}, chief_only.c_str()).tasks.size() == 1);
  }
  SECTION("TF_CONFIG's own errors come through") {
    CHECK_THROWS_WITH(plan_cluster(file_cluster_of(), {}, R"({"cluster": {"workers": ["127.0.0.1:1"]}})"),
                      Contains("did you mean 'worker'"));
  }
}

TEST_CASE("no cluster at all asks for --workers", "[unit]") {
  CHECK_THROWS_WITH(plan_cluster(file_cluster_of(), {}, nullptr), Contains("--workers N"));
  CHECK_THROWS_WITH(plan_cluster(file_cluster_of(), {}, "  "), Contains("--workers N"));
}

TEST_CASE("an address that is not local is refused before any port is bound", "[unit]") {
  CHECK_THROWS_WITH(
      plan_cluster(file_cluster_of(R"("cluster": {"worker": ["127.0.0.1:2222", "10.1.2.3:2222"]})"), {},
                   nullptr),
      Contains("worker:1") && Contains("'10.1.2.3:2222'") && Contains("not local"));
  CHECK_THROWS_WITH(plan_cluster(file_cluster_of(R"("cluster": {"chief": ["host1:2222"]})"), {}, nullptr),
                    Contains("'host1:2222'"));
}

TEST_CASE("a port in use names the address and the task", "[unit]") {
  ReservedPort taken = reserve_free_port();
  ReservedPort free_probe = reserve_free_port();
  const std::string free_address = free_probe.address;
  free_probe.socket.reset();
  const std::string text =
      R"("cluster": {"worker": [")" + free_address + R"(", ")" + taken.address + R"("]})";
  CHECK_THROWS_WITH(plan_cluster(file_cluster_of(text), {}, nullptr),
                    Contains("worker:1") && Contains(taken.address) && Contains("in use"));
}

TEST_CASE("parsing --inject values", "[unit]") {
  config::ClusterSpec spec;
  spec.tasks["worker"] = {"127.0.0.1:1", "127.0.0.1:2"};
  spec.tasks["ps"] = {"127.0.0.1:3"};
  const auto ok = parse_injections({"kill:worker:1@step=20", "kill:ps:0@step=0"}, spec);
  REQUIRE(ok.size() == 2);
  CHECK(ok[0].task.str() == "worker:1");
  CHECK(ok[0].value == "kill@step=20");
  CHECK(ok[1].value == "kill@step=0");
  const auto bytes = parse_injections({"kill:worker:0@ckpt_byte=0012345"}, spec);
  REQUIRE(bytes.size() == 1);
  CHECK(bytes[0].value == "kill@ckpt_byte=12345");

  CHECK_THROWS_WITH(
      parse_injections({"kill:worker:2@step=3"}, spec),
      Contains("worker:2 is not a task of this cluster") && Contains("worker:0, worker:1, ps:0"));
  CHECK_THROWS_WITH(parse_injections({"kill:chief:0@step=3"}, spec),
                    Contains("chief:0 is not a task"));
  for (const char* bad : {"stop:worker:1@step=3", "kill:worker@step=3", "kill:worker:x@step=3",
                          "kill:worker:1", "kill:worker:1@3", "kill:worker:1@step=",
                          "kill:worker:1@step=-1", "kill:worker:1@epoch=2", "kill:worker:1@ckpt_byte=",
                          "kill:worker:1@ckpt_byte=1e6", "kill:worker:1@=5", ""}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_injections({bad}, spec), ConfigError);
    CHECK_THROWS_WITH(parse_injections({bad}, spec),
                      Contains("--inject '" + std::string(bad) + "'"));
  }
  CHECK_THROWS_WITH(parse_injections({"kill:worker:1@step=3", "kill:worker:1@step=4"}, spec),
                    Contains("already has a fault"));
}

TEST_CASE("each task's TF_CONFIG is TensorFlow's format", "[unit]") {
  config::ClusterSpec spec;
  spec.tasks["chief"] = {"127.0.0.1:5"};
  spec.tasks["worker"] = {"127.0.0.1:6", "[::1]:7"};
  const auto j = nlohmann::json::parse(tf_config_json(spec, {"worker", 1}));
  CHECK(j["cluster"]["chief"] == nlohmann::json::array({"127.0.0.1:5"}));
  CHECK(j["cluster"]["worker"] == nlohmann::json::array({"127.0.0.1:6", "[::1]:7"}));
  CHECK(j["task"]["type"] == "worker");
  CHECK(j["task"]["index"] == 1);
  // And lib/config reads it back as this task of that cluster.
  const config::ClusterConfig c =
      config::resolve_cluster(file_cluster_of(), tf_config_json(spec, {"worker", 1}).c_str(), "");
  CHECK(c.task.str() == "worker:1");
  CHECK(c.spec.count("worker") == 2);
}
