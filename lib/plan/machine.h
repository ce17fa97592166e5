// What this machine offers a task: its GPUs, its cores, what the environment
// says (OMP_NUM_THREADS, LOCAL_RANK, DTRAIN_ALLOW_TF32) and, once the tasks have
// met, which machine each training task is on. Read once (read_machine), so the
// execution plan made from it is a pure function, table-tested with made-up
// machines.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dtrain::plan {

// What the process environment says about where to compute; read once, with the
// rest of the environment, by the task runtime (runtime/environment.h).
struct HostSettings {
  int omp_num_threads = 0;  // OMP_NUM_THREADS (0 = unset): the thread count when runtime.threads is 0
  // Tasks of this job on this machine (from the rendezvous; 1 alone): without
  // runtime.threads or OMP_NUM_THREADS each takes its share of the cores, so that
  // tasks started by hand on one machine do not fight over them.
  int tasks_on_host = 1;
  int local_rank = -1;  // LOCAL_RANK (-1 = unset): a task's GPU is LOCAL_RANK % GPUs
  // NCCL_HOSTID when set (nullopt: unset): NCCL tells processes apart by it, so
  // tasks sharing a GPU may still form a group (over sockets, with
  // NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, as nccl-tests runs several ranks on one GPU).
  std::optional<std::string> nccl_hostid;
  // DTRAIN_ALLOW_TF32 (0 turns TF32 convolutions off); unset leaves the backend's setting.
  std::optional<bool> allow_tf32;
  // How OpenMP's idle threads wait, and who chose: "GOMP_SPINCOUNT=30000" with
  // `omp_wait_by_dtrain` (apps/dtrain/openmp_wait.h set it), or the
  // environment's OMP_WAIT_POLICY / GOMP_SPINCOUNT; "" when neither (OpenMP's default).
  std::string omp_wait;
  bool omp_wait_by_dtrain = false;
};

struct Machine {
  HostSettings host;
  int gpus = 0;            // usable GPUs (kernels::list_gpus)
  std::string why_no_gpu;  // when gpus is 0: why
  int usable_cores = 1;    // the cores this process may use (its affinity mask)
  bool nccl_built = false;  // this build has the NCCL communicator (comm::kNcclBuilt)
  // The machine of each training rank (chief 0, workers after), as the tasks said
  // at the rendezvous; empty before they met: the plan then reads the hosts of
  // the cluster's addresses.
  std::vector<std::string> host_of_rank;
  // strategy.elastic: the ranks (as above) of the training tasks in the job's
  // current membership, ascending; the plan's rank and training tasks count
  // only these. Empty: every training task of the cluster.
  std::vector<int> members;
};

// A training rank's rank among `members` (Machine::members, ascending): its
// cluster rank when `members` is empty, -1 when it is not one of them.
int rank_among(int rank, const std::vector<int>& members);

// This machine as it is now: GPUs, cores, the NCCL build flag, and `host`. A job
// whose "device" is "cpu" needs no GPU listing (`gpus` false): none is looked for,
// so the CUDA runtime is not loaded for it (gpus stays 0).
Machine read_machine(const HostSettings& host, bool gpus = true);

}  // namespace dtrain::plan
