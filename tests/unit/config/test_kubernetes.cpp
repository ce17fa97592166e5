// Tests of the Kubernetes resolver (config/kubernetes.h): an Indexed Job's pods under
// a headless Service, each setting from the option, its variable or the default, and
// the error messages, which must name the variable or runtime.kubernetes key and a fix.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/kubernetes.h"
#include "core/error.h"

namespace dtrain::config {
namespace {

using Catch::Matchers::Contains;
using Strings = std::vector<std::string>;

// Pod 1 of the Indexed Job "train" with 3 completions.
EnvVars pod(const std::string& index = "1") {
  return {{"JOB_COMPLETION_INDEX", index},
          {"HOSTNAME", "train-" + index},
          {"DTRAIN_KUBERNETES_REPLICAS", "3"}};
}

std::string kubernetes_error(const EnvVars& env, const KubernetesOptions& options = {}) {
  try {
    resolve_kubernetes(env, options);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError from resolve_kubernetes");
  return "";
}

TEST_CASE("Kubernetes: the job and service from HOSTNAME, the default port", "[config][kubernetes]") {
  const ClusterConfig config = resolve_kubernetes(pod("1"), {});
  CHECK(config.spec.tasks == std::map<std::string, Strings>{
                                 {"worker", {"train-0.train:8888", "train-1.train:8888", "train-2.train:8888"}}});
  CHECK(config.task == TaskId{"worker", 1});
  CHECK(config.spec.chief() == TaskId{"worker", 0});
  CHECK(config.source == "kubernetes");
  CHECK(config.job_id == "kubernetes-train");
  CHECK_FALSE(config.local_rank.has_value());
}

TEST_CASE("Kubernetes: a job name with dashes and index 0", "[config][kubernetes]") {
  EnvVars env = pod("0");
  env["HOSTNAME"] = "mnist-run-2-0";  // job "mnist-run-2", pod 0
  const ClusterConfig config = resolve_kubernetes(env, {});
  CHECK(config.spec.address({"worker", 2}) == "mnist-run-2-2.mnist-run-2:8888");
  CHECK(config.task == TaskId{"worker", 0});
  CHECK(config.job_id == "kubernetes-mnist-run-2");
}

TEST_CASE("Kubernetes: variables override the derived values", "[config][kubernetes]") {
  EnvVars env = pod("2");
  env["HOSTNAME"] = "something-else";
  env["DTRAIN_KUBERNETES_JOB"] = "job";
  env["DTRAIN_KUBERNETES_SERVICE"] = "svc";
  env["DTRAIN_KUBERNETES_PORT"] = "2222";
  const ClusterConfig config = resolve_kubernetes(env, {});
  CHECK(config.spec.tasks.at("worker") == Strings{"job-0.svc:2222", "job-1.svc:2222", "job-2.svc:2222"});
  CHECK(config.task == TaskId{"worker", 2});
  CHECK(config.job_id == "kubernetes-job");
}

TEST_CASE("Kubernetes: options override the variables", "[config][kubernetes]") {
  EnvVars env = pod("1");
  env["DTRAIN_KUBERNETES_JOB"] = "job";
  env["DTRAIN_KUBERNETES_SERVICE"] = "svc";
  env["DTRAIN_KUBERNETES_PORT"] = "2222";
  KubernetesOptions options;
  options.job = "opt";
  options.service = "headless";
  options.replicas = 2;
  options.port = 3333;
  const ClusterConfig config = resolve_kubernetes(env, options);
  CHECK(config.spec.tasks.at("worker") == Strings{"opt-0.headless:3333", "opt-1.headless:3333"});
  CHECK(config.job_id == "kubernetes-opt");
}

TEST_CASE("Kubernetes: an empty variable counts as unset", "[config][kubernetes]") {
  EnvVars env = pod("1");
  env["DTRAIN_KUBERNETES_JOB"] = "";
  env["DTRAIN_KUBERNETES_SERVICE"] = "";
  env["DTRAIN_KUBERNETES_PORT"] = "";
  CHECK(resolve_kubernetes(env, {}).spec.address({"worker", 1}) == "train-1.train:8888");
}

TEST_CASE("Kubernetes: errors name the variable or key and a fix", "[config][kubernetes]") {
  EnvVars env = pod();
  env.erase("JOB_COMPLETION_INDEX");
  CHECK(kubernetes_error(env) ==
        "JOB_COMPLETION_INDEX is not set: run dtrain in a Kubernetes Indexed Job "
        "(completionMode: Indexed), or choose runtime.cluster_resolver");

  env = pod("one");
  CHECK(kubernetes_error(env) == "JOB_COMPLETION_INDEX='one': expected a whole number >= 0");

  env = pod();
  env.erase("DTRAIN_KUBERNETES_REPLICAS");
  CHECK(kubernetes_error(env) ==
        "the number of pods is unknown: set runtime.kubernetes.replicas or DTRAIN_KUBERNETES_REPLICAS "
        "to the Job's spec.completions");

  env = pod("3");
  CHECK(kubernetes_error(env) ==
        "JOB_COMPLETION_INDEX='3' is not below the 3 replicas (DTRAIN_KUBERNETES_REPLICAS='3'): set the "
        "replicas to the Job's spec.completions");
  KubernetesOptions options;
  options.replicas = 2;
  CHECK_THAT(kubernetes_error(pod("2"), options),
             Contains("JOB_COMPLETION_INDEX='2' is not below the 2 replicas (runtime.kubernetes.replicas=2)"));

  env = pod();
  env["DTRAIN_KUBERNETES_REPLICAS"] = "0";
  CHECK_THAT(kubernetes_error(env), Contains("DTRAIN_KUBERNETES_REPLICAS='0': a Job has at least 1 pod"));
  env["DTRAIN_KUBERNETES_REPLICAS"] = "200000";
  CHECK_THAT(kubernetes_error(env), Contains("DTRAIN_KUBERNETES_REPLICAS='200000': more than 100000 pods"));
  env["DTRAIN_KUBERNETES_REPLICAS"] = "three";
  CHECK(kubernetes_error(env) == "DTRAIN_KUBERNETES_REPLICAS='three': expected a whole number >= 0");
  options.replicas = -1;
  CHECK_THAT(kubernetes_error(pod(), options), Contains("runtime.kubernetes.replicas: -1 is below 1"));

  env = pod();
  env["DTRAIN_KUBERNETES_PORT"] = "70000";
  CHECK(kubernetes_error(env) == "DTRAIN_KUBERNETES_PORT='70000' is outside 1..65535");
  options = {};
  options.port = 70000;
  CHECK(kubernetes_error(pod(), options) == "runtime.kubernetes.port: 70000 is outside 1..65535");
}

TEST_CASE("Kubernetes: a job name that cannot be found or used", "[config][kubernetes]") {
  EnvVars env = pod("1");
  env.erase("HOSTNAME");
  CHECK(kubernetes_error(env) ==
        "HOSTNAME is not set, so the Job's name is unknown: set runtime.kubernetes.job or "
        "DTRAIN_KUBERNETES_JOB to the Job's name");

  env["HOSTNAME"] = "train-7";
  CHECK(kubernetes_error(env) ==
        "HOSTNAME='train-7' is not '<job>-1' (an Indexed Job's pod with JOB_COMPLETION_INDEX=1): set "
        "runtime.kubernetes.job or DTRAIN_KUBERNETES_JOB to the Job's name");
  env["HOSTNAME"] = "-1";
  CHECK_THAT(kubernetes_error(env), Contains("HOSTNAME='-1' is not '<job>-1'"));

  env = pod();
  env["DTRAIN_KUBERNETES_JOB"] = "my job";
  CHECK_THAT(kubernetes_error(env), Contains("DTRAIN_KUBERNETES_JOB='my job': ' ' cannot be part of a host name"));
  KubernetesOptions options;
  options.service = "svc/x";
  CHECK_THAT(kubernetes_error(pod(), options),
             Contains("runtime.kubernetes.service='svc/x': '/' cannot be part of a host name"));
}

}  // namespace
}  // namespace dtrain::config
