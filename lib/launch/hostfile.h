// `dtrain launch --hostfile FILE`: the hosts and their slots (DeepSpeed's and MPI's
// format), and the cluster they make.
//
//   # comments and blank lines are ignored
//   node1 slots=2
//   user@node2 slots=4
//
// Every slot is a worker, host after host (node1's slots are worker:0 and worker:1,
// node2's worker:2..5): the first host's first slot is the chief. The k-th slot of
// a host has the address host:port_base+k (the chief serves the rendezvous there).
#pragma once

#include <string>
#include <vector>

#include "launch/cluster_plan.h"

namespace dtrain::launch {

struct HostSlots {
  std::string target;  // what ssh is given: "node2" or "user@node2"
  std::string host;    // the host alone (the task's address)
  int slots = 1;
  int line = 0;        // in the hostfile, for messages
};

// Reads a hostfile. ConfigError naming "FILE:LINE" for a bad line (an unknown key, a
// slot count that is not a positive number, a host listed twice) or an empty file;
// IoError when it cannot be read.
std::vector<HostSlots> read_hostfile(const std::string& path);

// The cluster of these hosts' slots (PlannedTask ports are not reserved: the tasks
// run elsewhere). ConfigError when a port would pass 65535.
ClusterPlan plan_hostfile_cluster(const std::vector<HostSlots>& hosts, int port_base, const std::string& source);

// The host of each task of `plan` (its slot's HostSlots), and its slot on that host.
struct RemoteSlot {
  const HostSlots* host;
  int local_rank;
};
std::vector<RemoteSlot> remote_slots(const std::vector<HostSlots>& hosts);

}  // namespace dtrain::launch
