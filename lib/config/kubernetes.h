// The Kubernetes cluster resolver: the cluster and this task of an Indexed Job.
//
// The pods of an Indexed Job (completionMode: Indexed) with a headless Service are
// reachable as "<job>-<index>.<service>"; Kubernetes gives each its index in
// JOB_COMPLETION_INDEX and its hostname "<job>-<index>". Pod i is worker:i at
// "<job>-<i>.<service>:<port>"; the chief is worker:0. An option left empty (0 for
// the numbers) comes from a variable: DTRAIN_KUBERNETES_JOB (else the HOSTNAME less
// its "-<index>"), DTRAIN_KUBERNETES_SERVICE (else the job name),
// DTRAIN_KUBERNETES_REPLICAS (required) and DTRAIN_KUBERNETES_PORT (else 8888). Pure:
// the caller passes the variables it read (lib/config never calls getenv); errors
// are ConfigErrors naming the variable or the runtime.kubernetes key.
#pragma once

#include <string>

#include "config/cluster_spec.h"

namespace dtrain::config {

struct KubernetesOptions {
  std::string job;      // the Job's name; "" = DTRAIN_KUBERNETES_JOB, else from HOSTNAME
  std::string service;  // the headless Service; "" = DTRAIN_KUBERNETES_SERVICE, else the job
  int replicas = 0;     // the Job's completions; 0 = DTRAIN_KUBERNETES_REPLICAS
  int port = 0;         // every pod's port; 0 = DTRAIN_KUBERNETES_PORT, else 8888
};

// Resolves the cluster and this pod's task. source = "kubernetes",
// job_id = "kubernetes-<job>".
ClusterConfig resolve_kubernetes(const EnvVars& env, const KubernetesOptions& options);

}  // namespace dtrain::config
