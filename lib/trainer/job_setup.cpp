// Implementation of job_setup.h.
#include "trainer/job_setup.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/host.h"
#include "core/log.h"
#include "core/strings.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "strategy/registry.h"

namespace dtrain::trainer {

int setup_threads(const job::JobConfig& job, const HostSettings& host) {
  int threads = static_cast<int>(job.runtime.threads);
  if (threads <= 0) threads = host.omp_num_threads;
  if (threads <= 0) {
    const int cores = usable_cores();
    const int tasks = std::max(1, host.tasks_on_host);
    threads = std::max(1, cores / tasks);
    if (tasks > 1)
      log::info("threads: ", threads, " per task (", cores, " cores shared by the ", tasks,
                " tasks of this job on this host; runtime.threads or OMP_NUM_THREADS choose)");
  }
  kernels::set_num_threads(threads);
  return threads;
}

namespace {

// Several replicas in one process (only strategies with local replicas accept more than one).
bool keeps_to_cpu(const job::JobConfig& job) { return job.device == "auto" && job.strategy.replicas > 1; }

}  // namespace

void check_precision(const job::JobConfig& job, const Device& device) {
  const config::Precision precision = job.train.precision;
  if (precision == config::Precision::kFloat32) return;
  const std::string where = str(job.train.path, ".precision: \"", config::precision_name(precision), "\"");
  if (!device.is_cpu())
    throw ConfigError(str(where, " on ", device.str(),
                          ": dtrain's CUDA backend computes in float32 only so far (mixed precision runs on the "
                          "CPU); use \"float32\" on a GPU, or \"device\": \"cpu\""));
  if (precision == config::Precision::kMixedFloat16)
    throw ConfigError(str(where, " cannot train on the CPU: this build's oneDNN (2.6) has no float16 CPU kernels "
                          "(it runs ", kernels::cpu_isa(), "; native float16 math needs avx512_fp16); use "
                          "\"mixed_bfloat16\" on the CPU (bfloat16 has float32's range: no loss scaling needed)"));
  if (!kernels::cpu_has_bf16())
    log::warn(where, ": this CPU has no bfloat16 instructions (oneDNN runs ", kernels::cpu_isa(),
              "), so bfloat16 goes through conversions and trains slower than float32");
}

Device select_job_device(const job::JobConfig& job, const HostSettings& host) {
  if (host.allow_tf32) kernels::set_allow_tf32(*host.allow_tf32);
  if (keeps_to_cpu(job)) {
    if (!kernels::list_gpus().gpus.empty())
      log::info("device auto: ", strategy::entry_of(job.strategy).name, " with ", job.strategy.replicas,
                " replicas trains on the CPU (one replica per GPU in one process is not supported yet: the CUDA "
                "backend drives one GPU per process; use multi_worker_mirrored with one GPU per task)");
    check_precision(job, Device::cpu());
    return Device::cpu();
  }
  const Device device = kernels::select_device(local_gpu(job.device, host.local_rank));
  check_precision(job, device);
  return device;
}

std::string local_gpu(const std::string& device, int local_rank) {
  if (device != "auto" && device != "gpu" && device != "cuda") return device;
  if (local_rank < 0) return device;
  const size_t gpus = kernels::list_gpus().gpus.size();
  if (gpus == 0) return device;  // "auto" trains on the CPU, "gpu" fails with the reason
  return str("cuda:", static_cast<size_t>(local_rank) % gpus);
}

std::string describe_device(const Device& device) {
  if (device.is_cpu()) return device.str();
  for (const kernels::GpuInfo& g : kernels::list_gpus().gpus)
    if (g.index == device.index) {
      char memory[32];
      std::snprintf(memory, sizeof memory, "%.1f GiB", static_cast<double>(g.total_bytes) / (1u << 30));
      return str(device.str(), " (", g.name, ", ", memory, ", sm_", g.compute_major, g.compute_minor, ")");
    }
  return device.str();
}

std::string check_job_device(const job::JobConfig& job) {
  const kernels::GpuReport report = kernels::list_gpus();
  if (keeps_to_cpu(job)) return "cpu:0 (several replicas in one process train on the CPU)";
  if (job.device == "auto") {
    if (report.gpus.empty()) return str("cpu:0 (no GPU: ", report.why_none, ")");
    return describe_device(Device::cuda(0));
  }
  const Device wanted = Device::parse(job.device);
  if (wanted.is_cpu()) return "cpu:0";
  if (static_cast<size_t>(wanted.index) >= report.gpus.size()) kernels::select_device(job.device);  // throws why
  return describe_device(wanted);
}

void check_input_shape(const data::DataSourceSpec& spec, const Shape& sample_shape,
                       const nn::Sequential& model) {
  if (shape_numel(sample_shape) != shape_numel(model.input_shape()))
    throw ConfigError(str("model.input_shape ", shape_str(model.input_shape()), " does not match the samples of ",
                          spec.path, ", which have shape ", shape_str(sample_shape),
                          "; set model.input_shape to [", join([&] {
                            std::vector<std::string> dims;
                            for (int64_t d : sample_shape) dims.push_back(std::to_string(d));
                            return dims;
                          }(), ", "), "]"));
}

std::shared_ptr<data::Dataset> load_checked(const data::DataSourceSpec& spec,
                                            const nn::Sequential& model) {
  auto dataset = std::make_shared<data::Dataset>(data::load_dataset(spec));
  check_input_shape(spec, dataset->sample_shape, model);
  const Shape& out = model.output_shape();
  if (out.size() != 1)
    throw ConfigError(str("model: the last layer outputs ", shape_str(out),
                          " per sample, but the losses need (classes,); end the model with Flatten and Dense"));
  if (dataset->max_label >= out[0])
    throw ConfigError(str(spec.path, ": label ", dataset->max_label, " of sample ", dataset->max_label_index,
                      " is outside the model's ", out[0], " classes (0..", out[0] - 1,
                      "); make the last Dense layer's units at least ", dataset->max_label + 1));
  return dataset;
}

data::ShardPolicy shard_policy(const job::JobConfig& job, int num_workers) {
  const data::ShardPolicy policy = job.data.shard_policy;
  if (policy != data::ShardPolicy::kAuto || num_workers == 1) return policy;
  const data::DataSourceSpec& train = job.data.train;
  if (!train.format || !train.format->auto_shards_by_file) return data::ShardPolicy::kData;
  return data::expand_files(train).size() >= static_cast<size_t>(num_workers) ? data::ShardPolicy::kFile
                                                                              : data::ShardPolicy::kData;
}

data::DataSourceSpec task_source(const job::JobConfig& job, int worker_rank, int num_workers) {
  data::DataSourceSpec spec = job.data.train;
  if (num_workers == 1 || shard_policy(job, num_workers) != data::ShardPolicy::kFile) return spec;
  spec.files = data::expand_files(spec);
  if (spec.files.size() < static_cast<size_t>(num_workers))
    throw ConfigError(str("data.shard_policy: 'file' gives each worker its own files, but ", spec.path, " has ",
                          spec.files.size(), " file(s) for ", num_workers,
                          " workers; use \"data\" (shard by sample) or \"auto\""));
  std::vector<std::string> mine;
  for (size_t i = static_cast<size_t>(worker_rank); i < spec.files.size(); i += static_cast<size_t>(num_workers))
    mine.push_back(spec.files[i]);
  spec.files = mine;
  return spec;
}

data::PipelineOptions train_pipeline_options(const job::JobConfig& job, const strategy::Strategy& s,
                                             int worker_rank, int num_workers) {
  data::PipelineOptions o;
  o.batch_size = job.train.batch_size_per_replica * s.local_replicas();
  o.shuffle_buffer = job.data.shuffle_buffer;
  o.seed = job.train.seed;
  o.drop_remainder = job.data.drop_remainder || s.num_replicas_in_sync() > 1;  // replicas need equal batches
  o.prefetch = job.data.prefetch;
  o.cache = job.data.cache;
  if (num_workers > 1 && shard_policy(job, num_workers) == data::ShardPolicy::kData) {
    o.shard_count = num_workers;
    o.shard_index = worker_rank;
  }
  return o;
}

data::PipelineOptions eval_pipeline_options(const job::JobConfig& job) {
  data::PipelineOptions o;
  o.batch_size = job.train.eval_batch_size > 0 ? job.train.eval_batch_size : job.train.batch_size_per_replica;
  o.seed = job.train.seed;
  o.prefetch = job.data.prefetch;
  o.cache = job.data.cache;
  return o;
}

double mean_loss(const nn::LossStats& s) { return s.count ? s.loss_sum / s.count : 0.0; }
double accuracy(const nn::LossStats& s) { return s.count ? static_cast<double>(s.correct) / s.count : 0.0; }

nn::LossStats evaluate(strategy::Strategy& strategy, data::Pipeline& pipeline) {
  nn::LossStats stats;
  pipeline.start_epoch(0);
  data::Batch batch;
  while (pipeline.next(batch)) strategy.eval_step(batch, stats);
  return stats;
}

EpochReport epoch_report(int64_t epoch, int64_t epochs, int64_t steps, double seconds, const nn::LossStats& stats) {
  EpochReport report;
  report.epoch = epoch;
  report.epochs = epochs;
  report.steps = steps;
  report.seconds = seconds;
  report.samples_per_sec = stats.count / std::max(seconds, 1e-9);
  report.step_ms = steps > 0 ? seconds * 1000.0 / static_cast<double>(steps) : 0.0;
  report.loss = mean_loss(stats);
  report.accuracy = accuracy(stats);
  return report;
}

}  // namespace dtrain::trainer
