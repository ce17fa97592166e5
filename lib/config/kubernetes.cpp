// Implementation of kubernetes.h: each setting from the option or its variable, and
// the Indexed Job's stable pod names under its headless Service.
//
// An empty variable counts as unset (manifests often template `value: ""`). Messages
// name where a value came from: the runtime.kubernetes key or the variable.
#include "config/kubernetes.h"

#include <algorithm>
#include <cctype>

#include "config/variables.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::config {
namespace {

constexpr int kDefaultPort = 8888;
// Kubernetes' limit on an Indexed Job's completions (later a soft limit); also a guard
// against a mistyped number making a huge cluster.
constexpr int kMaxReplicas = 100000;

// A name that can be part of a host name: letters, digits, '-' and '.'.
void check_name(const std::string& where, const std::string& name) {
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '-' && c != '.')
      throw ConfigError(str(where, "='", name, "': '", c, "' cannot be part of a host name; ",
                            "Kubernetes names use a-z, 0-9, '-' and '.'"));
}

// The job name: the option, DTRAIN_KUBERNETES_JOB, or the HOSTNAME "<job>-<index>".
std::string job_name(const EnvVars& env, const KubernetesOptions& options, int index) {
  if (!options.job.empty()) {
    check_name("runtime.kubernetes.job", options.job);
    return options.job;
  }
  if (const std::string* job = find_variable(env, "DTRAIN_KUBERNETES_JOB")) {
    check_name("DTRAIN_KUBERNETES_JOB", *job);
    return *job;
  }
  const std::string fix = "set runtime.kubernetes.job or DTRAIN_KUBERNETES_JOB to the Job's name";
  const std::string* hostname = find_variable(env, "HOSTNAME");
  if (hostname == nullptr)
    throw ConfigError(str("HOSTNAME is not set, so the Job's name is unknown: ", fix));
  const std::string suffix = str("-", index);
  if (hostname->size() <= suffix.size() ||
      hostname->compare(hostname->size() - suffix.size(), suffix.size(), suffix) != 0)
    throw ConfigError(str("HOSTNAME='", *hostname, "' is not '<job>", suffix,
                          "' (an Indexed Job's pod with JOB_COMPLETION_INDEX=", index, "): ", fix));
  const std::string job = hostname->substr(0, hostname->size() - suffix.size());
  check_name("HOSTNAME", *hostname);
  return job;
}

}  // namespace

ClusterConfig resolve_kubernetes(const EnvVars& env, const KubernetesOptions& options) {
  const std::string* index_text = find_variable(env, "JOB_COMPLETION_INDEX");
  if (index_text == nullptr)
    throw ConfigError(
        "JOB_COMPLETION_INDEX is not set: run dtrain in a Kubernetes Indexed Job "
        "(completionMode: Indexed), or choose runtime.cluster_resolver");
  const int index = variable_number("JOB_COMPLETION_INDEX", *index_text);

  const std::string job = job_name(env, options, index);

  std::string service = job;
  if (!options.service.empty()) {
    service = options.service;
    check_name("runtime.kubernetes.service", service);
  } else if (const std::string* value = find_variable(env, "DTRAIN_KUBERNETES_SERVICE")) {
    service = *value;
    check_name("DTRAIN_KUBERNETES_SERVICE", service);
  }

  int replicas = options.replicas;
  std::string replicas_from = str("runtime.kubernetes.replicas=", replicas);
  if (replicas < 0)
    throw ConfigError(str("runtime.kubernetes.replicas: ", replicas,
                          " is below 1; give the Job's number of pods (spec.completions)"));
  if (replicas == 0) {
    const std::string* value = find_variable(env, "DTRAIN_KUBERNETES_REPLICAS");
    if (value == nullptr)
      throw ConfigError(
          "the number of pods is unknown: set runtime.kubernetes.replicas or "
          "DTRAIN_KUBERNETES_REPLICAS to the Job's spec.completions");
    replicas = variable_number("DTRAIN_KUBERNETES_REPLICAS", *value);
    replicas_from = str("DTRAIN_KUBERNETES_REPLICAS='", *value, "'");
    if (replicas < 1)
      throw ConfigError(str(replicas_from, ": a Job has at least 1 pod; give its spec.completions"));
  }
  if (replicas > kMaxReplicas)
    throw ConfigError(
        str(replicas_from, ": more than ", kMaxReplicas, " pods; give the Job's spec.completions"));
  if (index >= replicas)
    throw ConfigError(str("JOB_COMPLETION_INDEX='", index, "' is not below the ", replicas,
                          " replicas (", replicas_from,
                          "): set the replicas to the Job's spec.completions"));

  int port = options.port;
  if (port < 0 || port > 65535)
    throw ConfigError(str("runtime.kubernetes.port: ", port, " is outside 1..65535"));
  if (port == 0) {
    port = kDefaultPort;
    if (const std::string* value = find_variable(env, "DTRAIN_KUBERNETES_PORT")) {
      port = variable_number("DTRAIN_KUBERNETES_PORT", *value);
      if (port < 1 || port > 65535)
        throw ConfigError(str("DTRAIN_KUBERNETES_PORT='", *value, "' is outside 1..65535"));
    }
  }

  ClusterConfig config;
  std::vector<std::string>& workers = config.spec.tasks["worker"];
  for (int i = 0; i < replicas; ++i) workers.push_back(str(job, "-", i, ".", service, ":", port));
  config.task = {"worker", index};
  config.source = "kubernetes";
  config.job_id = str("kubernetes-", job);
  return config;
}

}  // namespace dtrain::config
