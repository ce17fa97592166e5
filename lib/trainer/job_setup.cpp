// Implementation of job_setup.h.
#include "trainer/job_setup.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "core/host.h"
#include "core/log.h"
#include "core/strings.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "strategy/pipeline_stages.h"
#include "strategy/registry.h"
#include "strategy/replica_devices.h"

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

// Device "auto" with several replicas in one process (only strategies with local
// replicas accept more than one): the CPU, unless strategy.devices names GPUs, or
// it is mirrored and this machine has a GPU for each replica.
bool keeps_to_cpu(const job::JobConfig& job) {
  if (job.device != "auto" || job.strategy.replicas <= 1) return false;
  if (!job.strategy.devices.empty()) return !strategy::devices_name_gpus(job.strategy);
  return strategy::entry_of(job.strategy).name != "mirrored" ||
         static_cast<int64_t>(kernels::list_gpus().gpus.size()) < job.strategy.replicas;
}

}  // namespace

void check_precision(const job::JobConfig& job, const Device& device) {
  const config::Precision precision = job.train.precision;
  if (precision == config::Precision::kFloat32) return;
  const std::string where = str(job.train.path, ".precision: \"", config::precision_name(precision), "\"");
  if (!device.is_cpu()) {
    const bool f16 = precision == config::Precision::kMixedFloat16;
    log::info(where, " on ", device.str(), ": Dense, Conv2D, pooling, activations and dropout compute in ",
              f16 ? "float16 (with dynamic loss scaling)" : "bfloat16",
              "; batch normalization, softmax and the loss in float32");
    return;
  }
  if (precision == config::Precision::kMixedFloat16)
    throw ConfigError(str(where, " cannot train on the CPU: this build's oneDNN (2.6) has no float16 CPU kernels "
                          "(it runs ", kernels::cpu_isa(), "; native float16 math needs avx512_fp16); use "
                          "\"mixed_bfloat16\" on the CPU (bfloat16 has float32's range: no loss scaling needed)"));
  if (kernels::cpu_bf16() != kernels::CpuBf16::kNative)
    log::warn(where, ": bfloat16: ", kernels::cpu_bf16_description());
}

Device select_job_device(const job::JobConfig& job, const HostSettings& host) {
  if (host.allow_tf32) kernels::set_allow_tf32(*host.allow_tf32);
  if (keeps_to_cpu(job)) {
    if (const size_t gpus = kernels::list_gpus().gpus.size(); gpus > 0)
      log::info("device auto: ", strategy::entry_of(job.strategy).name, " with ", job.strategy.replicas,
                " replicas trains on the CPU (", gpus, " GPU", gpus == 1 ? "" : "s",
                " here; only mirrored puts one replica on each GPU, with a GPU for every replica)");
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
  const int gpus = static_cast<int>(report.gpus.size());
  const int replicas = static_cast<int>(job.strategy.replicas);
  // Replicas on the CPU: strategy.devices must not name GPUs (throws why, as run would).
  const auto on_cpu = [&](const std::string& why) {
    (void)strategy::replica_devices(job.strategy, Device::cpu(), replicas, gpus);
    return why;
  };
  if (keeps_to_cpu(job)) return on_cpu("cpu:0 (several replicas in one process train on the CPU)");
  Device first = Device::cpu();
  if (job.device == "auto") {
    if (report.gpus.empty()) return on_cpu(str("cpu:0 (no GPU: ", report.why_none, ")"));
    first = Device::cuda(0);
  } else {
    first = Device::parse(job.device);
    if (first.is_cpu()) return on_cpu("cpu:0");
    if (first.index >= gpus) kernels::select_device(job.device);  // throws why
  }
  // Mirrored on GPUs: one replica per GPU (throws what is wrong with them).
  const std::vector<Device> devices = strategy::replica_devices(job.strategy, first, replicas, gpus);
  std::string out;
  for (const Device& d : devices) out += (out.empty() ? "" : ", ") + describe_device(d);
  return out;
}

namespace {

// A pipeline job: the model is cut into stages (only pipeline takes strategy.stages).
bool cuts_stages(const job::JobConfig& job) { return job.strategy.stages_auto || !job.strategy.stages.empty(); }

strategy::MemoryQuery base_query(const job::JobConfig& job) {
  strategy::MemoryQuery q;
  q.model = job.model;
  q.optimizer = job.optimizer;
  q.batch_rows = job.train.batch_size_per_replica;
  q.gradient_accumulation_steps = job.train.gradient_accumulation_steps;
  q.limit_bytes = job.runtime.memory_limit;
  return q;
}

}  // namespace

strategy::MemoryQuery memory_query(const job::JobConfig& job, int training_tasks) {
  const strategy::StrategyEntry& entry = strategy::entry_of(job.strategy);
  strategy::MemoryQuery q = base_query(job);
  if (entry.local_replicas) q.local_replicas = std::max<int64_t>(1, job.strategy.replicas);
  q.central_copy = entry.central_copy;
  if (job.strategy.shard_optimizer_state) q.optimizer_shards = std::max(1, training_tasks);
  if (cuts_stages(job)) {
    // Until the stages are known: the whole model, a replica's micro-batches all held.
    const int64_t m = std::max<int64_t>(1, job.strategy.micro_batches);
    q.batch_rows = (job.train.batch_size_per_replica + m - 1) / m;
    q.batches_in_flight = m;
  }
  return q;
}

strategy::MemoryQuery pipeline_stage_memory_query(const job::JobConfig& job, size_t first_layer, size_t last_layer,
                                                  int64_t micro_batch_rows, int64_t batches_in_flight) {
  strategy::MemoryQuery q = base_query(job);
  q.first_layer = static_cast<int64_t>(first_layer);
  q.last_layer = static_cast<int64_t>(last_layer);
  q.batch_rows = micro_batch_rows;
  q.batches_in_flight = batches_in_flight;
  q.needs_input_gradient = first_layer > 0;
  return q;
}

strategy::MemoryEstimate check_memory(const job::JobConfig& job, const strategy::MemoryQuery& query) {
  const strategy::MemoryEstimate estimate = strategy::estimate_memory(query);
  std::printf("%s", strategy::describe(estimate).c_str());
  std::fflush(stdout);
  const std::string problem = strategy::memory_limit_problem(estimate);
  if (!problem.empty()) throw ConfigError(str(job.source, ": ", job.runtime.path, ".memory_limit: ", problem));
  return estimate;
}

namespace {

// Forward + backward seconds of each top-level layer of the whole model on
// micro-batches of `rows` random samples: the mean of `steps` profiled steps
// after one warm-up step (primitive creation).
std::vector<double> measure_layer_seconds(const job::JobConfig& job, int64_t rows, int steps) {
  nn::Sequential model(job.model, job.train.seed);
  model.place(Device::cpu(), 0);
  const std::unique_ptr<nn::Loss> loss = nn::make_loss(job.loss);
  Tensor x(nn::with_batch(rows, model.input_shape()));
  Rng rng(job.train.seed);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = rng.uniform();
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  const int64_t classes = model.output_shape().empty() ? 1 : model.output_shape()[0];
  for (int32_t& l : labels) l = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(std::max<int64_t>(1, classes)));
  const Tensor y = nn::labels_tensor(labels, Device::cpu());
  const auto step = [&](int64_t i) {
    const Tensor out = model.forward(x, {true, job.train.seed, i});
    Tensor grad(out.shape());
    nn::LossRows r;
    loss->compute(out, y, &grad, 1.0f / static_cast<float>(rows), r);
    model.backward(grad);
  };
  step(0);
  model.set_profiling(true);
  for (int i = 0; i < steps; ++i) step(i + 1);
  std::vector<double> seconds;
  for (const auto& layer : model.layers())
    seconds.push_back((layer->time().forward_seconds + layer->time().backward_seconds) / steps);
  model.set_profiling(false);
  return seconds;
}

}  // namespace

std::optional<strategy::StageSplit> plan_pipeline(const job::JobConfig& job, comm::Communicator* workers) {
  if (!cuts_stages(job) || !workers) return std::nullopt;
  const std::vector<nn::LayerInfo> layers = nn::describe_layers(job.model);
  strategy::StageSplit split = strategy::pipeline_split(job.strategy, layers, workers->size());
  if (!job.strategy.stages_auto) return split;
  // Measured only where one task may hold the whole model.
  strategy::MemoryQuery whole = memory_query(job, workers->size());
  const bool fits = job.runtime.memory_limit == 0 ||
                    strategy::estimate_memory(whole).total <= job.runtime.memory_limit;
  float too_big = fits ? 0.0f : 1.0f;  // on any task: all take the same split
  workers->all_reduce(&too_big, 1, comm::ReduceOp::kSum);
  if (too_big > 0.0f) return split;  // by parameter bytes
  std::vector<float> cost(layers.size(), 0.0f);
  if (workers->rank() == 0) {
    const std::vector<double> seconds =
        measure_layer_seconds(job, job.train.batch_size_per_replica / job.strategy.micro_batches, 3);
    for (size_t i = 0; i < cost.size(); ++i) cost[i] = static_cast<float>(seconds[i]);
  }
  workers->broadcast(cost.data(), cost.size(), 0);
  return strategy::balanced_split(std::vector<double>(cost.begin(), cost.end()), static_cast<int>(split.stages()),
                                  "auto: measured time");
}

strategy::MemoryEstimate check_task_memory(const job::JobConfig& job, int training_tasks, int rank,
                                           const strategy::StageSplit* given) {
  const strategy::MemoryQuery query = memory_query(job, training_tasks);
  if (!cuts_stages(job)) return check_memory(job, query);
  if (training_tasks < 2) {
    // No cluster to cut the model over yet (validate without one): the whole model, not checked.
    const strategy::MemoryEstimate estimate = strategy::estimate_memory(query);
    std::printf("%s  (the whole model; each pipeline stage holds its own layers and is checked on its own)\n",
                strategy::describe(estimate).c_str());
    return estimate;
  }
  // This task's stage: its layers, one micro-batch's activations (the layers keep
  // one forward pass; the stage's other micro-batches in flight keep only their
  // inputs, for the forward run again before their backward).
  const std::vector<nn::LayerInfo> layers = nn::describe_layers(job.model);
  const strategy::StageSplit split = given ? *given : strategy::pipeline_split(job.strategy, layers, training_tasks);
  const int stages = static_cast<int>(split.stages());
  const strategy::StagePlace place = strategy::stage_of_task(rank, stages);
  const size_t first = split.starts[static_cast<size_t>(place.stage)];
  const size_t end = split.end_of(static_cast<size_t>(place.stage), layers.size());
  const int64_t m = job.strategy.micro_batches;
  const int64_t in_flight = strategy::micro_batches_in_flight(job.strategy.schedule, place.stage, stages,
                                                              m * job.train.gradient_accumulation_steps);
  strategy::MemoryQuery stage = pipeline_stage_memory_query(job, first, end, job.train.batch_size_per_replica / m, 1);
  stage.held_inputs = in_flight - 1;
  std::printf("Pipeline stage %d of %d: layers %s..%s\n", place.stage, stages, layers[first].name.c_str(),
              layers[end - 1].name.c_str());
  return check_memory(job, stage);
}

void check_input_shape(const data::DataSourceSpec& spec, const Shape& sample_shape, const Shape& model_input) {
  if (shape_numel(sample_shape) != shape_numel(model_input))
    throw ConfigError(str("model.input_shape ", shape_str(model_input), " does not match the samples of ",
                          spec.path, ", which have shape ", shape_str(sample_shape),
                          "; set model.input_shape to [", join([&] {
                            std::vector<std::string> dims;
                            for (int64_t d : sample_shape) dims.push_back(std::to_string(d));
                            return dims;
                          }(), ", "), "]"));
}

std::shared_ptr<data::Dataset> load_checked(const data::DataSourceSpec& spec, const nn::Sequential& model) {
  return load_checked(spec, strategy::ModelShapes{model.input_shape(), model.output_shape()});
}

std::shared_ptr<data::Dataset> load_checked(const data::DataSourceSpec& spec, const strategy::ModelShapes& shapes) {
  auto dataset = std::make_shared<data::Dataset>(data::load_dataset(spec));
  check_input_shape(spec, dataset->sample_shape, shapes.input);
  const Shape& out = shapes.output;
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

int64_t prefetch_batches(const job::JobConfig& job, const HostSettings& host, int threads, int local_replicas,
                         const Device& device) {
  if (job.data.prefetch) return *job.data.prefetch;
  if (!device.is_cpu()) return 2;
  const int cores = usable_cores();
  const int busy = std::max(1, host.tasks_on_host) * std::max({1, threads, local_replicas});
  if (busy < cores) return 2;
  log::debug("data.prefetch auto: 0 (", busy, " compute threads on ", cores,
             " cores: no core for a prefetch thread; batches are assembled on the training thread)");
  return 0;
}

data::PipelineOptions train_pipeline_options(const job::JobConfig& job, const strategy::Strategy& s,
                                             int worker_rank, int num_workers, int64_t prefetch) {
  data::PipelineOptions o;
  o.batch_size = job.train.batch_size_per_replica * s.local_replicas();
  o.shuffle_buffer = job.data.shuffle_buffer;
  o.seed = job.train.seed;
  o.drop_remainder = job.data.drop_remainder || s.num_replicas_in_sync() > 1;  // replicas need equal batches
  o.prefetch = prefetch;
  o.cache = job.data.cache;
  if (num_workers > 1 && shard_policy(job, num_workers) == data::ShardPolicy::kData) {
    o.shard_count = num_workers;
    o.shard_index = worker_rank;
  }
  return o;
}

data::PipelineOptions eval_pipeline_options(const job::JobConfig& job, int64_t prefetch) {
  data::PipelineOptions o;
  o.batch_size = job.train.eval_batch_size > 0 ? job.train.eval_batch_size : job.train.batch_size_per_replica;
  o.seed = job.train.seed;
  o.prefetch = prefetch;
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
