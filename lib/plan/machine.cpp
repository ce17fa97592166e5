// Implementation of machine.h: the one place the plan's inputs are read from the machine.
#include "plan/machine.h"

#include <algorithm>

#include "comm/nccl/nccl_support.h"
#include "core/host.h"
#include "kernels/device.h"

namespace dtrain::plan {

int rank_among(int rank, const std::vector<int>& members) {
  if (members.empty() || rank < 0) return rank;
  const auto it = std::find(members.begin(), members.end(), rank);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

Machine read_machine(const HostSettings& host, bool gpus) {
  Machine m;
  m.host = host;
  if (gpus) {
    const kernels::GpuReport report = kernels::list_gpus();
    m.gpus = static_cast<int>(report.gpus.size());
    m.why_no_gpu = report.why_none;
  } else {
    m.why_no_gpu = "not looked for: \"device\" is \"cpu\"";
  }
  m.usable_cores = usable_cores();
  m.nccl_built = comm::kNcclBuilt;
  return m;
}

}  // namespace dtrain::plan
