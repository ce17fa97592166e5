// trainer::prefetch_batches: data.prefetch as set wins; "auto" gives a prefetch
// thread (2 batches) only where it has a core of its own: a GPU job, or a host
// whose cores this job's compute threads leave one free; else 0.
#include <catch2/catch.hpp>

#include "core/host.h"
#include "job/job_config.h"
#include "trainer/job_setup.h"

using namespace dtrain;

namespace {

trainer::HostSettings host_with(int tasks) {
  trainer::HostSettings host;
  host.tasks_on_host = tasks;
  return host;
}

}  // namespace

TEST_CASE("data.prefetch auto: a prefetch thread only where a core is free for it") {
  job::JobConfig job;  // data.prefetch unset: "auto"
  const int cores = usable_cores();
  INFO(cores << " usable cores");
  const Device cpu = Device::cpu();
  // Every core taken: by one task's threads, by one thread in each of `cores`
  // tasks, by one task's local replicas.
  CHECK(trainer::prefetch_batches(job, host_with(1), cores, 1, cpu) == 0);
  CHECK(trainer::prefetch_batches(job, host_with(cores), 1, 1, cpu) == 0);
  CHECK(trainer::prefetch_batches(job, host_with(1), 1, cores, cpu) == 0);
  CHECK(trainer::prefetch_batches(job, host_with(2), cores, 1, cpu) == 0);  // more threads than cores
  // One task of one thread: a core is free unless the machine has only one.
  CHECK(trainer::prefetch_batches(job, host_with(1), 1, 1, cpu) == (cores > 1 ? 2 : 0));
  // A GPU job's training thread mostly waits for the GPU: always a prefetch thread.
  CHECK(trainer::prefetch_batches(job, host_with(cores), cores, 1, Device::cuda(0)) == 2);
}

TEST_CASE("data.prefetch set in the job is used as it is") {
  job::JobConfig job;
  job.data.prefetch = 0;
  CHECK(trainer::prefetch_batches(job, host_with(1), 1, 1, Device::cpu()) == 0);
  job.data.prefetch = 5;
  CHECK(trainer::prefetch_batches(job, host_with(64), 64, 1, Device::cpu()) == 5);
}
