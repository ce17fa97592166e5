// The plan's devices, threads and prefetch (plan_parts.h): where each replica of
// a task computes, with how many threads, and how far the data reads ahead.
// Pure functions of the job and the Machine; kernels::resolve_device's errors.
#include <algorithm>

#include "core/error.h"
#include "core/strings.h"
#include "kernels/device.h"
#include "plan/plan_parts.h"
#include "strategy/planning/replica_devices.h"

namespace dtrain::plan {
namespace {

// Device "auto" with several replicas in one process (only strategies with local
// replicas accept more than one): the CPU, unless strategy.devices names GPUs, or
// it is mirrored and this machine has a GPU for each replica.
bool keeps_to_cpu(const job::JobConfig& job, int gpus) {
  if (job.device != "auto" || job.strategy.replicas <= 1) return false;
  if (!job.strategy.devices.empty()) return !strategy::devices_name_gpus(job.strategy);
  return !strategy::entry_of(job.strategy).gpu_per_replica || gpus < job.strategy.replicas;
}

// A device that names no GPU index ("auto", "gpu", "cuda") on a machine with
// GPUs, for the task with this LOCAL_RANK (as dtrain launch and torchrun set it):
// "cuda:<LOCAL_RANK % GPUs>", so local tasks spread over the GPUs. Otherwise
// (local_rank < 0: unset) `device` unchanged.
std::string local_gpu(const std::string& device, int local_rank, int gpus) {
  if (device != "auto" && device != "gpu" && device != "cuda") return device;
  if (local_rank < 0 || gpus == 0) return device;  // "auto" trains on the CPU, "gpu" fails with the reason
  return str("cuda:", local_rank % gpus);
}

// The task's own device (replica 0's), as "device" and the machine say.
Device task_device(const job::JobConfig& job, const Machine& machine, std::string& why, std::string& notice) {
  if (keeps_to_cpu(job, machine.gpus)) {
    if (machine.gpus > 0)
      notice = str("device auto: ", strategy::entry_of(job.strategy).name, " with ", job.strategy.replicas,
                   " replicas trains on the CPU (", machine.gpus, " GPU", machine.gpus == 1 ? "" : "s",
                   " here; only mirrored puts one replica on each GPU, with a GPU for every replica)");
    why = str("\"device\": \"auto\" with ", job.strategy.replicas, " replicas in one process trains on the CPU",
              machine.gpus > 0 ? str(" (", machine.gpus, " GPU", machine.gpus == 1 ? "" : "s",
                                     " here; only mirrored puts one replica on each GPU, with a GPU for every replica)")
                               : std::string());
    return Device::cpu();
  }
  const std::string spec = local_gpu(job.device, machine.host.local_rank, machine.gpus);
  const Device device = kernels::resolve_device(spec, machine.gpus, machine.why_no_gpu);
  if (spec != job.device)
    why = str("\"device\": \"", job.device, "\" with LOCAL_RANK ", machine.host.local_rank, " on a machine with ",
              machine.gpus, " GPU", machine.gpus == 1 ? "" : "s");
  else if (job.device == "auto")
    why = machine.gpus > 0 ? std::string("\"device\": \"auto\": a usable GPU")
                           : str("\"device\": \"auto\": no usable GPU (", machine.why_no_gpu, ")");
  else
    why = str("\"device\": \"", job.device, "\"");
  return device;
}

}  // namespace

std::vector<Device> plan_devices(const job::JobConfig& job, const Machine& machine, Role role, Decision& decision) {
  const strategy::StrategyEntry& entry = strategy::entry_of(job.strategy);
  decision.what = "device";
  std::vector<Device> devices;
  if (role == Role::kServeVariables || role == Role::kWait) {
    devices = {Device::cpu()};
    decision.why = role == Role::kWait ? "no work under this strategy" : "a ps task serves its variables from host memory";
  } else if (role == Role::kTrain && entry.cross_task == strategy::CrossTask::kParameterServer) {
    devices = {Device::cpu()};
    decision.why = "parameter_server workers compute on the CPU";
  } else {
    const Device first = task_device(job, machine, decision.why, decision.notice);
    const int n = role == Role::kTrain && entry.local_replicas ? static_cast<int>(job.strategy.replicas) : 1;
    // On GPUs one GPU per replica (mirrored); the pipeline's stage has one device.
    devices = role == Role::kTrain && !entry.point_to_point
                  ? strategy::replica_devices(job.strategy, first, n, first.is_cpu() ? 0 : machine.gpus)
                  : std::vector<Device>{first};
    if (role == Role::kEvaluate) decision.why += "; the evaluator evaluates on one replica";
  }
  std::vector<std::string> names;
  for (const Device& d : devices) names.push_back(d.str());
  decision.choice = join(names, ", ");
  return devices;
}

int plan_threads(const job::JobConfig& job, const Machine& machine, int tasks_on_host, Decision& decision) {
  decision.what = "threads";
  int threads = static_cast<int>(job.runtime.threads);
  if (threads > 0) {
    decision.why = "runtime.threads (or --threads)";
  } else if (machine.host.omp_num_threads > 0) {
    threads = machine.host.omp_num_threads;
    decision.why = "OMP_NUM_THREADS";
  } else {
    const int tasks = std::max(1, tasks_on_host);
    threads = std::max(1, machine.usable_cores / tasks);
    decision.why = str("the ", machine.usable_cores, " core", machine.usable_cores == 1 ? "" : "s",
                       " this process may use",
                       tasks > 1 ? str(", shared by the ", tasks, " tasks of this job on this machine") : "");
    if (tasks > 1)
      decision.notice = str("threads: ", threads, " per task (", machine.usable_cores, " cores shared by the ", tasks,
                            " tasks of this job on this host; runtime.threads or OMP_NUM_THREADS choose)");
  }
  decision.choice = std::to_string(threads);
  return threads;
}

Decision openmp_wait_decision(const HostSettings& host) {
  Decision d;
  d.what = "openmp wait";
  if (host.omp_wait.empty()) {
    d.choice = "OpenMP's default";
    d.why = "neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set, and dtrain did not set them (spins up to 300,000 "
            "rounds: fast on idle cores, many times slower beside another busy process)";
  } else if (host.omp_wait_by_dtrain) {
    d.choice = host.omp_wait;
    d.why = "dtrain's choice: an idle thread spins about 30,000 rounds, then sleeps, so that a busy machine does not "
            "cost 6-17x (OpenMP's default spins 10 times longer); OMP_WAIT_POLICY=active or GOMP_SPINCOUNT choose";
  } else {
    d.choice = host.omp_wait;
    d.why = "the environment's";
  }
  return d;
}

int64_t plan_prefetch(const job::JobConfig& job, const Machine& machine, int tasks_on_host, int threads,
                      int local_replicas, const Device& device, Decision& decision) {
  decision.what = "data prefetch";
  int64_t prefetch = 0;
  if (job.data.prefetch) {
    prefetch = *job.data.prefetch;
    decision.why = "data.prefetch";
  } else if (!device.is_cpu()) {
    prefetch = 2;
    decision.why = "auto: the training thread mostly waits for the GPU";
  } else {
    const int busy = std::max(1, tasks_on_host) * std::max({1, threads, local_replicas});
    prefetch = busy < machine.usable_cores ? 2 : 0;
    decision.why = busy < machine.usable_cores
                       ? str("auto: ", busy, " compute thread(s) on ", machine.usable_cores, " cores leave one free")
                       : str("auto: ", busy, " compute thread(s) on ", machine.usable_cores,
                             " cores: no core for a prefetch thread; batches are assembled on the training thread");
  }
  decision.choice = str(prefetch, " batch", prefetch == 1 ? "" : "es");
  return prefetch;
}

}  // namespace dtrain::plan
