// Implementation of data_parallel.h.
#include "strategy/data_parallel.h"

#include <algorithm>

#include "comm/local/local_communicator.h"
#include "comm/shm/shm_communicator.h"
#if DTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "optim/clipping.h"
#include "strategy/sync/fully_sharded.h"
#include "strategy/parallel/grid_groups.h"
#include "strategy/planning/parallel_grid.h"
#include "strategy/registry.h"
#include "strategy/sync/shard_pieces.h"
#include "strategy/parallel/tensor_parallel.h"
#include "strategy/parallel/vocabulary_loss.h"
#include "strategy/sync/zero_shard.h"

namespace dtrain::strategy {
namespace {

// The non-trainable state (batch-norm moving statistics) of a model.
std::vector<nn::Param*> state_params(const nn::Sequential& model) {
  std::vector<nn::Param*> out;
  for (nn::Param* p : model.params())
    if (!p->trainable()) out.push_back(p);
  return out;
}

}  // namespace

DataParallelStrategy::DataParallelStrategy(const StrategyJob& job, const StrategyContext& context)
    : name_(entry_of(job.strategy).name),
      seed_(job.train.seed),
      accumulation_(job.train.gradient_accumulation_steps),
      batch_per_replica_(job.train.batch_size_per_replica),
      workers_(context.workers),
      mean_replica_rows_(context.mean_replica_rows),
      loss_(nn::make_loss(job.loss)),
      device_(context.device),
      threads_(std::max(1, context.threads)) {
  const int n = entry_of(job.strategy).local_replicas ? static_cast<int>(job.strategy.replicas) : 1;
  // The plan's device of each replica (on GPUs one GPU per replica: mirrored),
  // each made ready for this process.
  const std::vector<Device> devices =
      context.replicas.empty() ? std::vector<Device>(static_cast<size_t>(n), device_) : context.replicas;
  DT_CHECK_EQ(static_cast<int>(devices.size()), n);
  for (const Device& d : devices)
    if (!d.is_cpu()) kernels::select_device(d.str());
  device_ = devices[0];  // replica 0's: evaluation, staging, the strategy's device
  const Gradients path = context.gradient_path.value_or(gradient_path(
      job.strategy, entry_of(job.strategy),
      {n, workers_ ? workers_->size() : 1, workers_ != nullptr, context.gradients != nullptr, context.local_nccl}));
  if (path == Gradients::kCentralCopy) central_ = std::make_unique<CentralCopy>(job);
  // ZeRO-1: no full optimizer state anywhere (ZeroShard creates the slots of this task's slice).
  const bool zero = path == Gradients::kShardedOptimizer;
  // ZeRO-2/3: FullShard keeps this task's chunks of the gradients (and values) and their slots.
  const bool full = path == Gradients::kShardedGradients || path == Gradients::kShardedParameters;
  DT_CHECK(!(zero || full) || workers_, "ZeRO without the training tasks' group");
  const bool tensor_parallel = job.strategy.tensor_parallel > 1 && workers_;
  if (tensor_parallel) {
    check_tensor_parallel(job, workers_->size());
    // A grid of copies x tensor_parallel (parallel_grid.h): task r holds part r % T of copy r / T.
    const int t = static_cast<int>(job.strategy.tensor_parallel);
    GridGroups& groups = grid_groups(context.grid, *workers_, ParallelGrid(workers_->size() / t, 1, t), own_grid_);
    tensor_group_ = comm::borrow(groups.of(GridAxis::kTensor));
    if (groups.grid.data() > 1) copies_group_ = comm::borrow(groups.of(GridAxis::kData));
    if (n > 1 || !devices[0].is_cpu())
      throw ConfigError(str(job.strategy.path, ".tensor_parallel: runs on the CPU, one replica per task, so far; set "
                                               "\"device\": \"cpu\""));
  }
  if (zero) ZeroShard::check_supported(job, n);
  if (full) FullShard::check_supported(job, n, devices[0]);
  if (loss_scaling_on(job, context)) {
    DT_CHECK(!central_, "make_strategy refuses loss scaling with central_storage");
    if (full)
      throw ConfigError(str(job.strategy.path, ".shard: \"", shard_mode_name(job.strategy.shard),
                            "\" does not scale the loss (it trains in float32); use shard \"optimizer_state\""));
    if (tensor_parallel)  // (the parts would have to agree on skipping a step)
      throw ConfigError(str(job.strategy.path, ".tensor_parallel: does not scale the loss (it trains in float32); set "
                                               "train.precision to \"float32\""));
    loss_scale_ = std::make_unique<optim::DynamicLossScale>();
  }
  std::vector<std::unique_ptr<comm::Communicator>> local;
  if (n > 1 && !central_) local = make_local_group(devices, context.local_nccl);
  // Whether the workers' all-reduce takes the gradients where they lie (the
  // same answer on every task: it asks them all for a shared area at once).
  const bool shared_gradients = path == Gradients::kTasks && !tensor_parallel && devices[0].is_cpu() &&
                                job.strategy.allreduce_dtype == AllreduceDType::kFloat32;
  replicas_.resize(n);
  for (int i = 0; i < n; ++i) {
    Replica& r = replicas_[i];
    r.device = devices[static_cast<size_t>(i)];
    place_replica(r, job, path, shared_gradients);
    if (!local.empty()) r.local = std::move(local[i]);
  }
  if (workers_ && n > 1) {
    // Several replicas in each task: they reduce in the process (shared memory
    // between threads), replica 0 across the tasks, then back to the others.
    comm::HostLayout layout;
    for (int g = 0; g < workers_->size() * n; ++g) {
      layout.host_of.push_back(g / n);
      layout.local_rank_of.push_back(g % n);
    }
    for (int i = 0; i < n; ++i) {
      Replica& r = replicas_[i];
      r.group = comm::make_hierarchical_communicator(workers_->rank() * n + i, layout, std::move(r.local),
                                                     i == 0 ? comm::borrow(*workers_) : nullptr);
    }
  }
  if (workers_ && !tp_) {
    // The chief's parameters are the starting point of every worker.
    for (nn::Param* p : replicas_[0].model->params()) workers_->broadcast(p->value, 0);
  }
  make_syncs(job, context, path);
  if (n > 1) {
    threads_each_ = std::max(1, threads_ / n);
    pool_ = std::make_unique<ReplicaPool>(n, threads_each_);
  }
}

DataParallelStrategy::~DataParallelStrategy() = default;

void DataParallelStrategy::place_replica(Replica& r, const StrategyJob& job, Gradients path, bool shared_gradients) {
  const bool sharded = path == Gradients::kShardedOptimizer || path == Gradients::kShardedGradients ||
                       path == Gradients::kShardedParameters;
  // Same seed: every replica starts from the same parameters.
  r.model = std::make_unique<nn::Sequential>(job.model, job.train.seed);
  if (tensor_group_) {  // this task's parts of the split layers (the whole model's initial values)
    const std::vector<SplitLayer> plan = tensor_split_plan(job.model, tensor_group_->size(), job.strategy.tensor_whole,
                                                           vocabulary_parallel_loss(job.loss));
    tp_ = std::make_unique<TensorParallel>(plan, *r.model, *tensor_group_);
    DT_CHECK(tp_->plan().size() == plan.size(), "tensor_parallel: the model lacks a layer its plan splits");
    if (tp_->split_classes() > 0)  // the output's logits stay split: the loss takes them so
      vocabulary_loss_ = std::make_unique<VocabularyParallelLoss>(*tensor_group_, tp_->split_classes());
    if (workers_->rank() == 0)
      log::info("tensor_parallel: ", grid_text(workers_->size(), tensor_group_->size()), ": ",
                describe_tensor_split(job.model, tp_->plan()));
  }
  // (ZeRO and tensor_parallel clip by norms over the slices and parts: UpdateStep)
  r.optimizer = optim::make_optimizer(sharded ? ZeroShard::optimizer_spec(job.optimizer)
                                      : tp_   ? optim::without_norm_clipping(job.optimizer)
                                              : job.optimizer);
  // Params, grads and optimizer slots in one allocation on the device; the
  // grads of a task's single host replica in the workers' shared area where
  // they have one (tasks sharing a machine: shared memory), where the
  // all-reduce sums them without copying them in or out.
  Tensor gradient_memory;
  if (shared_gradients) {
    const int64_t floats = r.model->gradient_floats();
    if (std::shared_ptr<float> area = workers_->shared_area(static_cast<size_t>(floats))) {
      gradient_memory = Tensor::over_host_memory(std::move(area), floats);
      if (workers_->rank() == 0)
        log::info("comm: gradients in shared memory, all-reduced where they lie (", floats * 4, " bytes a task)");
    }
  }
  // (ZeRO creates the slots of this task's slices itself)
  r.model->place(r.device, sharded ? 0 : r.optimizer->slots_per_param(), gradient_memory);
  r.trainable = r.model->trainable_params();
  if (!sharded) r.optimizer->create_state(r.trainable, r.model->arena());
  r.layer_params = trainable_indices_by_layer(*r.model, r.trainable);
  const bool sums_itself = path == Gradients::kShardedGradients || path == Gradients::kShardedParameters;
  if (accumulation_ > 1 && !sums_itself)  // (ZeRO-2/3 sum the micro-batches in their shard)
    for (nn::Param* p : r.trainable) r.accumulated.emplace_back(p->value.shape(), r.device);
}

void DataParallelStrategy::make_syncs(const StrategyJob& job, const StrategyContext& context, Gradients path) {
  Replica& first = replicas_[0];
  if (path == Gradients::kShardedOptimizer) {
    auto zero = std::make_unique<ZeroShard>(first.trainable, *workers_, job.optimizer, *first.optimizer);
    zero_ = zero.get();
    first.sync = std::move(zero);
  } else if (path == Gradients::kShardedGradients || path == Gradients::kShardedParameters) {
    auto full = std::make_unique<FullShard>(*first.model, *workers_, job.optimizer, *first.optimizer,
                                            job.strategy.shard, job.strategy.prefetch, job.strategy.min_unit_params);
    full_ = full.get();
    first.sync = std::move(full);
  } else {
    // The group the plan's path reduces over: the tasks' NCCL group on their GPUs
    // (the other collectives stay on `workers`), the copies holding this task's
    // part (tensor_parallel), else the replica's (local, hierarchical, the tasks').
    DT_CHECK(path != Gradients::kNccl || context.gradients, "the plan's NCCL group was not connected");
    for (Replica& r : replicas_) {
      comm::Communicator* group = path == Gradients::kNccl ? context.gradients
                                  : tp_                    ? copies_group_.get()
                                                           : group_of(r);
      r.sync = make_gradient_sync(path, r.trainable, group, job.strategy.bytes_per_pack, job.strategy.allreduce_dtype);
    }
  }
  std::optional<SplitNorms> split;  // tensor_parallel: norms over the parts (the optimizer clips by value only)
  if (tp_)
    split = SplitNorms{tp_->norm_counted(first.trainable), tensor_group_.get(), nullptr, job.optimizer.clipnorm,
                       job.optimizer.global_clipnorm};
  for (Replica& r : replicas_) {
    if (loss_scale_) r.sync->track_non_finite();
    r.update_step.emplace(*r.optimizer, loss_scale_.get(), split);
  }
  // The step's loss sums and the stop flag ride along with the gradients'
  // collective (the last bucket's all-reduce; ZeRO-1's small all-reduce): no
  // collective of their own on the step's critical path. Not where the buckets
  // travel as bfloat16, which would round the sums and counts (carries_sums).
  // (tensor_parallel: the stop flag must reach every task, not only the copies' group)
  metrics_ride_along_ = workers_ && !tp_ && replicas_.size() == 1 && first.sync->carries_sums();
  if (metrics_ride_along_)
    first.sync->ride_along(4, [this](float* out) {
      // The replica's stats are read here, once (train_step does not read them again).
      Replica& r = replicas_[0];
      for (const nn::LossRows& rows : r.rows) nn::Loss::add_stats(rows, r.stats);
      out[0] = static_cast<float>(r.stats.loss_sum);
      out[1] = static_cast<float>(r.stats.correct);
      out[2] = static_cast<float>(r.stats.count);
      out[3] = stop_requested_ ? 1.0f : 0.0f;
    });
}

int DataParallelStrategy::num_replicas_in_sync() const {
  if (tp_) return workers_->size() / tensor_group_->size();  // the copies
  return local_replicas() * (workers_ ? workers_->size() : 1);
}

std::vector<std::unique_ptr<comm::Communicator>> DataParallelStrategy::make_local_group(
    const std::vector<Device>& devices, bool nccl) {
  if (nccl) {
#if DTRAIN_HAVE_NCCL
    // One NCCL communicator per GPU, each used by its replica's thread.
    std::vector<int> gpus;
    comm::NcclOptions options;
    for (const Device& d : devices) {
      gpus.push_back(d.index);
      // A blocking collective follows its replica's compute stream, not CUDA's legacy default stream.
      options.compute_streams.push_back(kernels::compute_stream(d));
    }
    options.name = "the mirrored replicas' NCCL group";
    auto group = comm::make_local_nccl_group(gpus, options);
    log::info("comm: mirrored replicas on ", devices.size(), " GPUs all-reduce with NCCL (", comm::nccl_version(), ")");
    return {std::make_move_iterator(group.begin()), std::make_move_iterator(group.end())};
#else
    DT_CHECK(false, "a local NCCL group planned in a build without NCCL");
#endif
  }
  // Shared memory between the threads (GPU gradients through host copies).
  return comm::make_local_group(static_cast<int>(devices.size()));
}

comm::Communicator* DataParallelStrategy::group_of(Replica& r) {
  if (r.group) return r.group.get();
  if (workers_) return workers_;
  return r.local.get();
}

void DataParallelStrategy::forward_and_loss(Replica& r, int index, const data::Batch& task_batch, int64_t i,
                                            int64_t k, nn::StepContext& ctx) {
  const int64_t rows = task_batch.size() / local_replicas();
  DT_CHECK_EQ(rows * local_replicas(), task_batch.size());
  const data::Batch mine = task_batch.slice(rows * index, rows);  // with each sample's labels
  const auto [images, labels] = on_device(mine, r.device);
  const trace::Span forward_span("forward", "compute");
  ctx.weights_changed = i == 0;  // one update's micro-batches share the weights' bf16 copies
  const Tensor output = r.model->forward(images, ctx);
  if (!r.grad_output.defined() || r.grad_output.shape() != output.shape())
    r.grad_output = Tensor(output.shape(), r.device);
  // The gradient of the mean loss over this replica's K micro-batches; the
  // all-reduce (mean over replicas) makes it the mean over the global batch.
  // (Replicas with unequal rows, an elastic group's uneven split: each
  // sample weighs 1 / (the mean rows x K), so the mean is still per sample.)
  // Under loss scaling, that gradient times the scale (1 without). (The scale
  // is per sample: the loss divides it among a sequence's positions.)
  const float scale = loss_scale_ ? static_cast<float>(loss_scale_->scale()) : 1.0f;
  const double mean_rows = mean_replica_rows_ > 0.0 ? mean_replica_rows_ : static_cast<double>(rows);
  const float per_sample = scale / static_cast<float>(mean_rows * static_cast<double>(k));
  if (vocabulary_loss_)
    vocabulary_loss_->compute(output, labels, &r.grad_output, per_sample, r.rows[i]);
  else
    loss_->compute(output, labels, &r.grad_output, per_sample, r.rows[i]);
}

void DataParallelStrategy::replica_step(Replica& r, int index, const std::vector<data::Batch>& micro_batches,
                                        int64_t step) {
  kernels::use_device(r.device);  // this thread issues the replica's ops on its GPU
  r.stats = {};
  r.comm_wait = 0.0;
  const double tp_seconds_before = tp_ ? tp_->comm_seconds() : 0.0;
  Stopwatch compute;
  if (central_) central_->read_into(*r.model);
  // Different replicas draw different dropout masks.
  // (tensor_parallel: a copy's tasks are one replica, their whole layers draw the same)
  const int replica_of_task = !workers_ ? 0 : tp_ ? workers_->rank() / tensor_group_->size() : workers_->rank();
  const uint64_t replica_id = static_cast<uint64_t>(index + local_replicas() * replica_of_task);
  nn::StepContext ctx{true, replica_id == 0 ? seed_ : hash_u64(seed_, replica_id), step};
  const int64_t k = static_cast<int64_t>(micro_batches.size());
  // Summed over the micro-batches here, unless the sync sums them (ZeRO-2/3's shards).
  const bool accumulate = k > 1 && !r.sync->sums_micro_batches();
  r.rows.resize(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    forward_and_loss(r, index, micro_batches[i], i, k, ctx);
    if (i < k - 1) {
      const trace::Span backward_span("backward", "compute");
      r.model->backward(r.grad_output);
      if (accumulate)
        for (size_t j = 0; j < r.trainable.size(); ++j) kernels::axpy(1.0f, r.trainable[j]->grad, r.accumulated[j]);
      continue;
    }
    // The last backward hands each layer's gradients to the sync as it finishes them.
    r.sync->begin_backward();
    trace::Span backward_span("backward", "compute");
    r.model->backward(r.grad_output, [&](size_t layer) {
      for (const size_t j : r.layer_params[layer]) {
        nn::Param* p = r.trainable[j];
        if (accumulate) {
          kernels::axpy(1.0f, r.accumulated[j], p->grad);
          r.accumulated[j].zero();
        }
        r.sync->param_ready(p);
      }
    });
    backward_span.end();
    r.comm_wait = r.sync->finish_backward();
  }
  if (tp_) r.comm_wait += tp_->comm_seconds() - tp_seconds_before;  // the split layers' all-reduces
  r.compute = compute.seconds() - r.comm_wait;
  const trace::Span update_span("update", "compute");
  Stopwatch update;
  r.finite = !loss_scale_ || r.sync->all_finite();
  const bool applied = r.sync->updates_replica() && r.update_step->run(*r.sync, r.finite, step);
  r.update = update.seconds();
  r.comm_wait += r.sync->after_update(applied);
}

std::pair<Tensor, Tensor> DataParallelStrategy::on_device(const data::Batch& b, const Device& device) {
  for (Staged& s : staged_)
    if (s.source == b.images.data() && s.images.numel() == b.images.numel()) {
      std::pair<Tensor, Tensor> out{s.images.reshaped(b.images.shape()), s.labels};
      s = Staged{};
      return out;
    }
  return {b.images.to(device), nn::labels_tensor(b.labels, device)};
}

void DataParallelStrategy::stage(const std::vector<data::Batch>& batches) {
  staged_.clear();
  for (const data::Batch& b : batches) {
    // Tensor::to starts the copy on the copy stream and returns at once (on the
    // CPU it returns the same tensor).
    staged_.push_back({b.images.data(), b.images.to(device_), nn::labels_tensor(b.labels, device_)});
  }
}

void DataParallelStrategy::train_step(const std::vector<data::Batch>& micro_batches, int64_t step,
                                      nn::LossStats& stats, const std::vector<data::Batch>* upcoming) {
  DT_CHECK(!micro_batches.empty(), "a step needs at least one micro-batch");
  Stopwatch timer;
  if (pool_) {
    kernels::set_num_threads(threads_each_);
    pool_->run([&](int i) { replica_step(replicas_[i], i, micro_batches, step); });
    kernels::set_num_threads(threads_);
  } else {
    replica_step(replicas_[0], 0, micro_batches, step);
  }
  if (loss_scale_) {
    for (const Replica& r : replicas_)
      DT_CHECK(r.finite == replicas_[0].finite, "the replicas disagree on skipping a loss-scaled step");
    loss_scale_->update(replicas_[0].finite);
  }
  if (central_) {
    std::vector<nn::Sequential*> models;
    for (Replica& r : replicas_) models.push_back(r.model.get());
    central_->apply(models, step);
    replicas_behind_ = true;
  }
  // The next step's batches travel to the device while this step computes; then
  // reading the loss waits for this step to finish.
  // (Only with one local replica: mirrored replicas look up batches from several threads.)
  if (upcoming && replicas_.size() == 1) stage(*upcoming);
  nn::LossStats local;
  double wait = 0.0, compute = 0.0, update = 0.0;  // the slowest replica's
  for (Replica& r : replicas_) {
    if (!metrics_ride_along_)  // else read when the last bucket was packed
      for (const nn::LossRows& rows : r.rows) nn::Loss::add_stats(rows, r.stats);
    local.add(r.stats);
    wait = std::max(wait, r.comm_wait);
    compute = std::max(compute, r.compute);
    update = std::max(update, r.update);
  }
  Stopwatch metrics;
  stop_agreed_ = stop_requested_;
  if (tp_) {
    // A copy's tasks computed the same loss: the copies' sums (the global
    // batch's), and the stop flag from every task.
    if (copies_group_) {
      float s[3] = {static_cast<float>(local.loss_sum), static_cast<float>(local.correct),
                    static_cast<float>(local.count)};
      copies_group_->all_reduce(s, 3, comm::ReduceOp::kSum);
      const auto samples = static_cast<int64_t>(s[2] + 0.5f);
      local = {s[0], static_cast<int64_t>(s[1] + 0.5f), samples, samples * micro_batches[0].label_width};
    }
    float stop = stop_requested_ ? 1.0f : 0.0f;
    workers_->all_reduce(&stop, 1, comm::ReduceOp::kSum);
    stop_agreed_ = stop > 0.0f;
  } else if (workers_) {
    // Report the loss and accuracy of the global batch, as TF does; the stop
    // flag goes with them, so every task learns that one of them was asked to
    // stop. They came with the gradients, or take an all-reduce of their own.
    // (Every sample of the job has the batch's label width: the positions are the
    // samples times it, and need no place in the all-reduce.)
    float s[4] = {static_cast<float>(local.loss_sum), static_cast<float>(local.correct),
                  static_cast<float>(local.count), stop_requested_ ? 1.0f : 0.0f};
    if (metrics_ride_along_) std::copy_n(replicas_[0].sync->extras().begin(), 4, s);
    else workers_->all_reduce(s, 4, comm::ReduceOp::kSum);
    const auto samples = static_cast<int64_t>(s[2] + 0.5f);
    local = {s[0], static_cast<int64_t>(s[1] + 0.5f), samples, samples * micro_batches[0].label_width};
    stop_agreed_ = s[3] > 0.0f;
  }
  stats.add(local);
  timings_.steps += 1;
  timings_.comm_wait_seconds += wait;
  timings_.compute_seconds += compute;
  timings_.update_seconds += update;
  timings_.metrics_seconds += metrics.seconds();
  timings_.step_seconds += timer.seconds();
}

void DataParallelStrategy::eval_step(const data::Batch& batch, nn::LossStats& stats) {
  const nn::StepContext ctx{false, seed_, 0};
  if (replicas_behind_) {
    central_->read_into(*replicas_[0].model);  // evaluate the central values
    replicas_behind_ = false;
  }
  staged_.clear();  // training batches staged but not used (a stop) must not match
  const auto [images, labels] = on_device(batch, device_);
  const Tensor output = replicas_[0].model->forward(images, ctx);
  nn::LossRows rows;
  if (vocabulary_loss_) vocabulary_loss_->compute(output, labels, nullptr, 0.0f, rows);
  else loss_->compute(output, labels, nullptr, 0.0f, rows);
  nn::Loss::add_stats(rows, stats);
}


void DataParallelStrategy::load_state(const TensorLookup& model, const TensorLookup& optimizer) {
  if (central_) {
    load_named(central_->model().params(), model, "model");
    load_named(central_->optimizer().state(), optimizer, "optimizer state");
  }
  if (full_) {  // this task's chunks of the trainable tensors; the rest whole
    Replica& r = replicas_[0];
    load_named(state_params(*r.model), model, "model");
    full_->load(model, optimizer, *r.optimizer);
    return;
  }
  if (tp_) {  // this task's parts of the whole tensors
    Replica& r = replicas_[0];
    tp_->load(r.model->params(), model, "model");
    r.optimizer->create_state(r.trainable);
    tp_->load(r.optimizer->state(), optimizer, "optimizer state");
    return;
  }
  for (Replica& r : replicas_) {
    load_named(r.model->params(), model, "model");
    if (zero_) {  // this task's slice of each whole slot: resumes onto any number of tasks
      zero_->load_slots(*r.optimizer, optimizer);
      continue;
    }
    r.optimizer->create_state(r.trainable);
    load_named(r.optimizer->state(), optimizer, "optimizer state");
  }
}

size_t DataParallelStrategy::shard_units() const { return full_ ? full_->units() : 0; }

ModelShapes DataParallelStrategy::model_shapes() {
  ModelShapes shapes = Strategy::model_shapes();
  if (vocabulary_loss_) shapes.output.back() = tp_->split_classes();  // (the whole classes: this task's logits are a slice)
  return shapes;
}

std::string DataParallelStrategy::params_sha256() {
  if (full_) {
    std::string hash;
    full_->with_whole_model([&] { hash = replicas_[0].model->params_sha256(); });
    return hash;
  }
  return tp_ ? tp_->whole_sha256(replicas_[0].model->params()) : model().params_sha256();
}

std::vector<StatePiece> DataParallelStrategy::state_pieces() {
  if (tp_) {  // the first copy's tasks write the parts (every copy holds the same)
    if (workers_->rank() >= tensor_group_->size()) return {};
    return tp_->pieces(replicas_[0].model->params(), replicas_[0].optimizer->state());
  }
  std::vector<StatePiece> out;
  if (full_) {  // the chief writes the non-trainable state whole; every task its chunks
    if (workers_->rank() == 0)
      for (nn::Param* p : state_params(*replicas_[0].model)) out.push_back({p->name, p->value.shape(), 0, &p->value, false});
    for (StatePiece& piece : full_->state_pieces(*replicas_[0].optimizer)) out.push_back(std::move(piece));
    return out;
  }
  if (!zero_) return out;
  // Every task holds the same parameters: the chief writes them whole.
  if (workers_->rank() == 0)
    for (nn::Param* p : replicas_[0].model->params()) out.push_back({p->name, p->value.shape(), 0, &p->value, false});
  for (StatePiece& piece : zero_->slot_pieces(*replicas_[0].optimizer)) out.push_back(std::move(piece));
  return out;
}

void DataParallelStrategy::with_whole_model(const std::function<void(nn::Sequential& model)>& use) {
  if (!full_) return use(model());
  full_->with_whole_model([&] { use(*replicas_[0].model); });
}

void DataParallelStrategy::sync_state() {
  if (central_) {
    // The central copy holds the state: every replica reads it.
    for (Replica& r : replicas_) central_->read_into(*r.model);
    replicas_behind_ = false;
    return;
  }
  const size_t n = replicas_.size();
  std::vector<std::vector<nn::Param*>> states;
  for (const Replica& r : replicas_) states.push_back(state_params(*r.model));
  for (size_t j = 0; j < states[0].size(); ++j) {
    // Mean over the local replicas (in replica order: deterministic), then over workers.
    Tensor& mine = states[0][j]->value;
    for (size_t i = 1; i < n; ++i) kernels::axpy(1.0f, states[i][j]->value.to(mine.device()), mine);
    if (n > 1) kernels::divide(mine, static_cast<float>(n));
    // (tensor_parallel: the same in a copy's tasks; averaged over the copies)
    if (comm::Communicator* over = tp_ ? copies_group_.get() : workers_) over->all_reduce(mine, comm::ReduceOp::kMean);
    for (size_t i = 1; i < n; ++i) states[i][j]->value.copy_from(mine);
  }
}

}  // namespace dtrain::strategy
