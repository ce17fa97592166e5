// The execution plan's parts, each decided in its own file (private to lib/plan):
// devices and threads (plan_devices.cpp), memory (plan_memory.h, public: the
// trainer and the tests use its queries), the connections (execution_plan.cpp).
#pragma once

#include <vector>

#include "plan/execution_plan.h"

namespace dtrain::plan {

// The device of every replica of a task with `role`, and why.
std::vector<Device> plan_devices(const job::JobConfig& job, const Machine& machine, Role role, Decision& why);

// Compute threads: runtime.threads, else OMP_NUM_THREADS, else this process's
// cores divided among the job's `tasks_on_host` tasks on this machine.
int plan_threads(const job::JobConfig& job, const Machine& machine, int tasks_on_host, Decision& why);
// How OpenMP's idle threads wait (HostSettings::omp_wait), and who chose it.
Decision openmp_wait_decision(const HostSettings& host);

// data.prefetch as set, or for "auto": 2 batches when the prefetch thread has a
// core of its own (a GPU job, whose training thread mostly waits for the GPU; or
// cores the tasks' compute threads do not all take), else 0: the batch is then
// assembled on the training thread, since a prefetch thread could only run by
// interrupting a training thread in the middle of its step.
int64_t plan_prefetch(const job::JobConfig& job, const Machine& machine, int tasks_on_host, int threads,
                      int local_replicas, const Device& device, Decision& why);

}  // namespace dtrain::plan
