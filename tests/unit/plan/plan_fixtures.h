// Made-up jobs, clusters and machines for the execution plan's table tests.
#pragma once

#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "job/job_config.h"
#include "plan/machine.h"
#include "support/tiny_dense_job.h"

namespace dtrain::test {

// The tiny Dense job (support/tiny_dense_job.h: 6 inputs, dense 8, dense_1 3,
// batch 4) with `strategy`'s section (a JSON object's inside, starting with its
// type: R"("type": "mirrored", "replicas": 2)") and `device`.
inline job::JobConfig plan_job(const std::string& strategy, const std::string& device = "auto") {
  const std::string prefix = "\"type\": \"";
  const size_t end = strategy.find('"', prefix.size());
  job::JobConfig job = tiny_dense_job(strategy.substr(prefix.size(), end - prefix.size()), strategy.substr(end + 1));
  job.device = device;
  return job;
}

// A cluster of `workers` workers (and `ps` ps tasks, a chief, an evaluator where
// asked), each worker on host "h<i % hosts>", seen from `task`.
inline config::ClusterConfig plan_cluster(int workers, int hosts, const config::TaskId& task, int ps = 0,
                                          bool chief = false, bool evaluator = false) {
  config::ClusterConfig c;
  c.source = "TF_CONFIG";
  int port = 2000;
  for (int i = 0; i < workers; ++i)
    c.spec.tasks["worker"].push_back("h" + std::to_string(i % hosts) + ":" + std::to_string(port++));
  for (int i = 0; i < ps; ++i) c.spec.tasks["ps"].push_back("p" + std::to_string(i) + ":" + std::to_string(port++));
  if (chief) c.spec.tasks["chief"].push_back("h0:" + std::to_string(port++));
  if (evaluator) c.spec.tasks["evaluator"].push_back("e0:" + std::to_string(port++));
  c.task = task;
  return c;
}

// A machine of `cores` cores and `gpus` GPUs, with or without NCCL in the build.
inline plan::Machine plan_machine(int cores, int gpus = 0, bool nccl = false, int local_rank = -1) {
  plan::Machine m;
  m.usable_cores = cores;
  m.gpus = gpus;
  m.why_no_gpu = gpus ? "" : "no CUDA device";
  m.nccl_built = nccl;
  m.host.local_rank = local_rank;
  return m;
}

}  // namespace dtrain::test
