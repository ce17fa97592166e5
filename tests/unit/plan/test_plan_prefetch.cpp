// The plan's data prefetch: data.prefetch as set wins; "auto" gives a prefetch
// thread (2 batches) only where it has a core of its own: a GPU job, or a host
// whose cores this job's compute threads leave one free; else 0.
#include <catch2/catch.hpp>

#include "plan/execution_plan.h"
#include "plan_fixtures.h"

using namespace dtrain;

namespace {

int64_t prefetch(const job::JobConfig& job, int cores, int gpus = 0, int tasks_on_host = 1) {
  plan::Machine m = test::plan_machine(cores, gpus);
  m.host.tasks_on_host = tasks_on_host;
  return plan::make_execution_plan(job, {}, m).prefetch;
}

}  // namespace

TEST_CASE("plan: data.prefetch auto gives a prefetch thread only where a core is free for it") {
  const job::JobConfig one = test::plan_job(R"("type": "one_device")");
  // Every core taken: by one task's threads, by one thread in each of `cores`
  // tasks, by one task's local replicas.
  CHECK(prefetch(one, 4) == 0);                 // 4 threads on 4 cores
  CHECK(prefetch(one, 1) == 0);                 // a machine of one core
  job::JobConfig one_thread = one;
  one_thread.runtime.threads = 1;
  CHECK(prefetch(one_thread, 4, 0, 4) == 0);    // 4 tasks of 1 thread on 4 cores
  CHECK(prefetch(one_thread, 4, 0, 1) == 2);    // 1 thread on 4 cores: one free
  job::JobConfig replicas = test::plan_job(R"("type": "mirrored", "replicas": 4)");
  replicas.runtime.threads = 1;
  CHECK(prefetch(replicas, 4) == 0);            // 4 replicas' threads on 4 cores
  job::JobConfig many = one;
  many.runtime.threads = 8;
  CHECK(prefetch(many, 4, 0, 2) == 0);          // more threads than cores
  // A GPU job's training thread mostly waits for the GPU: always a prefetch thread.
  CHECK(prefetch(test::plan_job(R"("type": "one_device")", "gpu"), 4, 1, 4) == 2);
}

TEST_CASE("plan: data.prefetch set in the job is used as it is") {
  job::JobConfig job = test::plan_job(R"("type": "one_device")");
  job.data.prefetch = 0;
  CHECK(prefetch(job, 64) == 0);
  job.data.prefetch = 5;
  CHECK(prefetch(job, 1) == 5);
}
