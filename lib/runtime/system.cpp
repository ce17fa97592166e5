// devices_report(), backends_description() and collectives_description()
// (run.h): what `dtrain devices` and `dtrain version` print, from the kernels'
// device layer and the communicators.
#include <nlohmann/json.hpp>

#include "comm/nccl/nccl_support.h"
#include "core/strings.h"
#if DTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif
#include "kernels/device.h"
#include "runtime/run.h"

namespace dtrain::runtime {

std::string devices_report(bool json) {
  const kernels::GpuReport report = kernels::list_gpus(/*free_memory=*/true);
  const std::string cpu_line =
      str("CPU: oneDNN's instruction set ", kernels::cpu_isa(), " (bfloat16: ", kernels::cpu_bf16_description(),
          ")\n");
  if (json) {
    nlohmann::json gpus = nlohmann::json::array();
    for (const kernels::GpuInfo& g : report.gpus)
      gpus.push_back({{"index", g.index},
                      {"device", str("cuda:", g.index)},
                      {"name", g.name},
                      {"compute_capability", str(g.compute_major, ".", g.compute_minor)},
                      {"multiprocessors", g.multiprocessors},
                      {"total_bytes", g.total_bytes},
                      {"free_bytes", g.free_bytes}});
    nlohmann::json out = {{"cuda_backend", report.built_with_cuda},
                          {"gpus", gpus},
                          {"cpu_isa", kernels::cpu_isa()},
                          {"cpu_bf16", kernels::cpu_has_bf16()},
                          {"cpu_bf16_path", kernels::cpu_bf16_name(kernels::cpu_bf16())}};
    if (report.gpus.empty()) out["why_none"] = report.why_none;
    return out.dump(2) + "\n";
  }
  if (report.gpus.empty())
    return cpu_line + str("No usable GPU: ", report.why_none, ".\nJobs with \"device\": \"auto\" train on the CPU.\n");
  char line[256];
  std::snprintf(line, sizeof line, "%-8s %-32s %-8s %5s %12s %12s\n", "device", "name", "compute", "SMs", "memory",
                "free");
  std::string out = cpu_line + line;
  for (const kernels::GpuInfo& g : report.gpus) {
    std::snprintf(line, sizeof line, "%-8s %-32s %-8s %5d %9.1f GiB %9.1f GiB\n", str("cuda:", g.index).c_str(),
                  g.name.c_str(), str(g.compute_major, ".", g.compute_minor).c_str(), g.multiprocessors,
                  static_cast<double>(g.total_bytes) / (1u << 30), static_cast<double>(g.free_bytes) / (1u << 30));
    out += line;
  }
  return out;
}

std::string collectives_description() {
  std::string nccl = "NCCL: not in this build";
#if DTRAIN_HAVE_NCCL
  nccl = comm::nccl_version();
#endif
  return str("Gloo (TCP), shared memory, ", nccl);
}

std::string backends_description() {
  return str(kernels::backends_description(), "\nbfloat16 on the CPU: ", kernels::cpu_bf16_description());
}

}  // namespace dtrain::runtime
