// This machine as the tasks of a job see it: how many cores this process may run
// on, and an identity that tasks on the same machine share (the rendezvous
// compares them to learn which tasks share a host; IP strings cannot tell).
#pragma once

#include <string>

namespace dtrain {

// The CPUs this process may run on (its affinity mask: taskset, a cgroup
// cpuset), at least 1.
int usable_cores();

// "<hostname>/<boot id>": equal for every process of one running machine (the
// kernel's boot id, /proc/sys/kernel/random/boot_id, tells apart two machines
// with the same hostname; network namespaces and containers share it).
std::string host_identity();

}  // namespace dtrain
