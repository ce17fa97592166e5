// Implementation of pipeline.h.
#include "strategy/pipeline.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/ops.h"
#include "nn/losses.h"
#include "strategy/sync/gradient_reducer.h"
#include "optim/clipping.h"
#include "strategy/parallel/pipeline_links.h"
#include "strategy/registry.h"
#include "strategy/sync/shard_pieces.h"
#include "strategy/parallel/tensor_parallel.h"
#include "strategy/parallel/vocabulary_loss.h"

namespace dtrain::strategy {
namespace {

// Message tags (below 2^48): training steps' activations and gradients, the
// evaluation's activations, the parameter-hash exchange.
constexpr uint64_t kEvalTag = uint64_t{1} << 47;
constexpr uint64_t kHashTag = uint64_t{1} << 46;
enum Direction : uint64_t { kActivation = 0, kGradient = 1 };

uint64_t step_tag(int64_t step, int64_t micro, Direction direction) {
  return (static_cast<uint64_t>(step) << 20) | (static_cast<uint64_t>(micro) << 2) | direction;
}

// The rows of a step's micro-batch: rows [begin, begin + rows) of batch `batch`.
struct Micro {
  int64_t batch = 0, begin = 0, rows = 0;
};

// Each batch cut into `m` micro-batches of nearly equal size (the first
// batch % m one row larger); micro-batches of no rows are left out.
std::vector<Micro> cut(const std::vector<data::Batch>& batches, int64_t m) {
  std::vector<Micro> out;
  for (size_t b = 0; b < batches.size(); ++b) {
    const int64_t n = batches[b].size();
    int64_t begin = 0;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t rows = n / m + (i < n % m ? 1 : 0);
      if (rows > 0) out.push_back({static_cast<int64_t>(b), begin, rows});
      begin += rows;
    }
  }
  return out;
}

// A float buffer holding `bytes` (raw bytes travel through the float send/recv).
size_t floats_for(size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); }

}  // namespace

PipelineStrategy::PipelineStrategy(const StrategyJob& job, const StrategyContext& context)
    : spec_(job.strategy),
      seed_(job.train.seed),
      schedule_(job.strategy.schedule),
      micro_batches_(job.strategy.micro_batches),
      device_(context.device),
      workers_(context.workers) {
  DT_CHECK(workers_, "make_strategy gives pipeline a cluster");
  const std::vector<nn::LayerInfo> layers = nn::describe_layers(job.model);
  StageSplit split = pipeline_split(spec_, layers, workers_->size());
  if (!context.stage_starts.empty()) {
    DT_CHECK(context.stage_starts.size() == split.stages() && context.stage_starts.front() == 0,
             "the trainer's stage split has ", context.stage_starts.size(), " stages, not ", split.stages());
    split = {context.stage_starts, context.stage_split_how};
  }
  const int stages = static_cast<int>(split.stages());
  const int tensors = static_cast<int>(spec_.tensor_parallel);
  grid_ = ParallelGrid(pipeline_copies(spec_, workers_->size()), stages, tensors);
  DT_CHECK(grid_.size() == workers_->size(), "the pipeline's grid ", grid_.describe(), " over ", workers_->size(),
           " tasks");
  const GridPlace place = grid_.place(workers_->rank());
  stats_.stages = stages;
  stats_.copies = grid_.data();
  stats_.stage = place.stage;
  stats_.copy = place.copy;
  stats_.tensor = place.part;
  stats_.tensors = tensors;
  check_micro_batches(spec_, job.train.batch_size_per_replica);
  const size_t first = split.starts[static_cast<size_t>(stats_.stage)];
  const size_t end = split.end_of(static_cast<size_t>(stats_.stage), layers.size());
  stats_.split = describe_split(split, layers);
  stats_.split_how = split.how;
  shapes_ = {layers.front().input_shape, layers.back().output_shape, nn::input_vocabulary(job.model)};
  stage_input_ = layers[first].input_shape;
  stage_output_ = layers[end - 1].output_shape;
  if (workers_->rank() == 0)
    log::info("pipeline: ", stages, " stages x ", stats_.copies, " cop", stats_.copies == 1 ? "y" : "ies",
              tensors > 1 ? str(" x ", tensors, " tensor") : "", " (", split.how, "): ", stats_.split, "; ",
              micro_batches_, " micro-batches, ", schedule_ == PipelineSchedule::kGpipe ? "gpipe" : "1f1b");

  // (with tensor_parallel, one pipeline per part: part p of each stage talks to part p of the next)
  GridGroups& groups = grid_groups(context.grid, *workers_, grid_, own_grid_);
  pipe_ = comm::borrow(groups.of(GridAxis::kPipeline));
  peers_ = comm::borrow(groups.of(GridAxis::kData));
  DT_CHECK(pipe_ && pipe_->size() == stages && pipe_->rank() == stats_.stage, "the pipeline group is malformed");
  DT_CHECK(peers_ && peers_->size() == stats_.copies, "the stage's group is malformed");

  model_ = std::make_unique<nn::Sequential>(job.model, seed_, first, end);
  if (tensors > 1) split_tensors(job, split, groups.of(GridAxis::kTensor));
  // Norms over more than this stage's own whole tensors (global_clipnorm: every
  // stage's; a split tensor: its parts') are clip_split_by_norm's; the optimizer
  // clips the rest itself (clipnorm of whole tensors, clipvalue).
  const bool split_norms = tp_ || job.optimizer.global_clipnorm > 0.0;
  optimizer_ = optim::make_optimizer(split_norms ? optim::without_norm_clipping(job.optimizer) : job.optimizer);
  model_->place(device_, optimizer_->slots_per_param());
  trainable_ = model_->trainable_params();
  optimizer_->create_state(trainable_, model_->arena());
  for (nn::Param* p : model_->params())
    if (!p->trainable()) state_.push_back(p);
  for (nn::Param* p : trainable_) accumulated_.emplace_back(p->value.shape(), device_);
  layer_params_ = trainable_indices_by_layer(*model_, trainable_);
  if (last_stage() && !vocabulary_loss_) loss_ = nn::make_loss(job.loss);
  if (loss_scaling_on(job, context)) loss_scale_ = std::make_unique<optim::DynamicLossScale>();
  // Every copy of a stage starts from copy 0's parameters.
  if (peers_->size() > 1)
    for (nn::Param* p : model_->params()) peers_->broadcast(p->value, 0);
  // (the plan's; without one, the same rule: gradient_path.h)
  const Gradients path = context.gradient_path.value_or(
      gradient_path(job.strategy, entry_of(job.strategy), {1, workers_->size(), true}));
  DT_CHECK(path == Gradients::kStageCopies || path == Gradients::kStageAlone, "a pipeline's gradients go ",
           gradients_name(path));
  sync_ = make_gradient_sync(path, trainable_, peers_.get(), job.strategy.bytes_per_pack,
                             job.strategy.allreduce_dtype);
  std::optional<SplitNorms> split_norm;
  if (split_norms)
    split_norm = SplitNorms{tp_ ? tp_->norm_counted(trainable_) : std::vector<bool>(trainable_.size(), true),
                            tensor_group_.get(), pipe_.get(), job.optimizer.clipnorm, job.optimizer.global_clipnorm};
  update_step_.emplace(*optimizer_, loss_scale_.get(), std::move(split_norm));
  connect_links(context);
}

void PipelineStrategy::split_tensors(const StrategyJob& job, const StageSplit& split, comm::Communicator& group) {
  check_tensor_parallel(job, workers_->size(), split.starts);
  if (!device_.is_cpu())
    throw ConfigError(str(job.strategy.path, ".tensor_parallel: runs on the CPU so far, and this task's device is ",
                          device_.str(), "; set \"device\": \"cpu\""));
  tensor_group_ = comm::borrow(group);
  DT_CHECK(tensor_group_ && tensor_group_->size() == stats_.tensors && tensor_group_->rank() == stats_.tensor,
           "the stage's tensor group is malformed");
  const std::vector<SplitLayer> plan = tensor_split_plan(job.model, stats_.tensors, job.strategy.tensor_whole,
                                                         vocabulary_parallel_loss(job.loss), split.starts);
  tp_ = std::make_unique<TensorParallel>(plan, *model_, *tensor_group_);
  if (last_stage() && tp_->split_classes() > 0)  // the output's logits stay split: the loss takes them so
    vocabulary_loss_ = std::make_unique<VocabularyParallelLoss>(*tensor_group_, tp_->split_classes());
  stats_.tensor_split = describe_tensor_split(job.model, plan);
  if (workers_->rank() == 0)
    log::info("tensor_parallel: ", grid_text(workers_->size(), stats_.tensors, stats_.stages), ": ",
              stats_.tensor_split);
}

void PipelineStrategy::compute_loss(const Tensor& out, const Tensor& labels, Tensor* grad, float scale,
                                    nn::LossRows& rows) {
  if (vocabulary_loss_) vocabulary_loss_->compute(out, labels, grad, scale, rows);
  else loss_->compute(out, labels, grad, scale, rows);
}

void PipelineStrategy::connect_links(const StrategyContext& context) {
  // The NCCL links the runtime connected (a GPU job where every stage of the copy
  // has a GPU of its own), else Gloo's on this copy's group.
  if (context.stage_links) {
    links_ = context.stage_links;
  } else {
    own_links_ = make_host_links(*pipe_, device_);
    links_ = own_links_.get();
  }
  stats_.links = links_->name();
  if (workers_->rank() == 0) log::info("pipeline: activations and gradients between stages: ", stats_.links);
}

PipelineStrategy::~PipelineStrategy() = default;

std::vector<PipelineStrategy::Op> PipelineStrategy::schedule(int64_t count) const {
  std::vector<Op> ops;
  if (schedule_ == PipelineSchedule::kGpipe) {
    for (int64_t m = 0; m < count; ++m) ops.push_back({true, m});
    for (int64_t m = 0; m < count; ++m) ops.push_back({false, m});
    return ops;
  }
  // 1F1B: warm-up forwards, then one forward and one backward in turn, then the
  // remaining backwards.
  const int64_t warmup = std::min<int64_t>(stats_.stages - stats_.stage - 1, count);
  for (int64_t m = 0; m < warmup; ++m) ops.push_back({true, m});
  for (int64_t m = warmup; m < count; ++m) {
    ops.push_back({true, m});
    ops.push_back({false, m - warmup});
  }
  for (int64_t m = count - warmup; m < count; ++m) ops.push_back({false, m});
  return ops;
}

Tensor PipelineStrategy::receive(int64_t rows, const Shape& sample, int peer, uint64_t tag) {
  const trace::Span span("pipeline receive", "comm");
  Stopwatch wait;
  Tensor t = links_->receive(nn::with_batch(rows, sample), peer, tag);
  timings_.comm_wait_seconds += wait.seconds();
  return t;
}

void PipelineStrategy::train_step(const std::vector<data::Batch>& batches, int64_t step, nn::LossStats& stats,
                                  const std::vector<data::Batch>* /*upcoming*/) {
  DT_CHECK(!batches.empty(), "a step needs at least one batch");
  Stopwatch step_time;
  const MemoryScope::Active counted(step_memory_);
  const std::vector<Micro> micros = cut(batches, micro_batches_);
  const int64_t count = static_cast<int64_t>(micros.size());
  int64_t samples = 0;
  for (const Micro& m : micros) samples += m.rows;
  // The gradient of the mean loss over the step's samples, summed micro-batch by
  // micro-batch (times the loss scale, under loss scaling).
  const float loss_scale = loss_scale_ ? static_cast<float>(loss_scale_->scale()) : 1.0f;
  const float scale = loss_scale / static_cast<float>(samples);
  const uint64_t copy = static_cast<uint64_t>(stats_.copy);
  nn::StepContext ctx{true, copy == 0 ? seed_ : hash_u64(seed_, copy), step};
  std::vector<Tensor> inputs(static_cast<size_t>(count)), grads(static_cast<size_t>(count));
  std::vector<nn::LossRows> rows(static_cast<size_t>(count));
  int64_t resident = -1, held = 0, backwards = 0;
  double busy = 0.0;
  const double tensor_comm_before = tp_ ? tp_->comm_seconds() : 0.0;
  bool first_forward = true;
  for (const Op& op : schedule(count)) {
    const Micro& mb = micros[static_cast<size_t>(op.micro)];
    const size_t m = static_cast<size_t>(op.micro);
    if (op.forward) {
      inputs[m] = first_stage() ? batches[mb.batch].images.slice_rows(mb.begin, mb.rows).to(device_)
                                : receive(mb.rows, stage_input_, stats_.stage - 1, step_tag(step, op.micro, kActivation));
      if (++held > stats_.peak_inputs_held) {
        stats_.peak_inputs_held = held;
        stats_.peak_input_bytes = held * mb.rows * shape_numel(stage_input_) * static_cast<int64_t>(sizeof(float));
      }
      Stopwatch compute;
      const trace::Span span("forward", "compute");
      ctx.weights_changed = first_forward;
      first_forward = false;
      const Tensor out = model_->forward(inputs[m], ctx);
      resident = op.micro;
      if (last_stage()) {
        const std::vector<int32_t> mine = batches[mb.batch].sample_labels(mb.begin, mb.rows);
        grads[m] = Tensor(out.shape(), device_);
        compute_loss(out, nn::labels_tensor(mine, device_), &grads[m], scale, rows[m]);
        busy += compute.seconds();
      } else {
        busy += compute.seconds();
        links_->send(out.clone(), stats_.stage + 1, step_tag(step, op.micro, kActivation));
      }
      continue;
    }
    const Tensor grad = last_stage() ? grads[m]
                                     : receive(mb.rows, stage_output_, stats_.stage + 1,
                                               step_tag(step, op.micro, kGradient));
    Stopwatch compute;
    const trace::Span span("backward", "compute");
    if (resident != op.micro) {
      // The layers hold another micro-batch's forward: run this one's again,
      // putting the non-trainable state back (it was updated by the first run).
      std::vector<Tensor> saved;
      for (const nn::Param* p : state_) saved.push_back(p->value.clone());
      ctx.weights_changed = false;
      model_->forward(inputs[m], ctx);
      for (size_t i = 0; i < state_.size(); ++i) state_[i]->value.copy_from(saved[i]);
      resident = op.micro;
      ++stats_.recomputed;
    }
    // Summed in micro-batch order as one_device's gradient accumulation does: the
    // earlier ones into the buffers, the buffers into the last one's gradients,
    // layer by layer as its backward finishes them, each then ready for the
    // copies' bucketed all-reduce.
    const bool last_backward = ++backwards == count;
    if (last_backward) sync_->begin_backward();
    const auto on_layer_done = [&](size_t layer) {
      for (const size_t j : layer_params_[layer]) {
        if (count > 1) {
          kernels::axpy(1.0f, accumulated_[j], trainable_[j]->grad);
          accumulated_[j].zero();
        }
        sync_->param_ready(trainable_[j]);
      }
    };
    const Tensor dx = model_->backward(grad, last_backward ? std::function<void(size_t)>(on_layer_done) : nullptr,
                                       /*input_grad=*/!first_stage());
    if (!last_backward)
      for (size_t j = 0; j < trainable_.size(); ++j) kernels::axpy(1.0f, trainable_[j]->grad, accumulated_[j]);
    busy += compute.seconds();
    inputs[m] = Tensor();
    grads[m] = Tensor();
    --held;
    if (!first_stage()) links_->send(dx.clone(), stats_.stage - 1, step_tag(step, op.micro, kGradient));
  }
  {
    Stopwatch wait;
    links_->drain();
    timings_.comm_wait_seconds += wait.seconds();
  }
  // The copies' mean gradients (the last bucket's all-reduce, and any still in
  // flight), before anything reads them: the non-finite count below is over the
  // mean, which is inf or NaN wherever any copy's gradient was.
  timings_.comm_wait_seconds += sync_->finish_backward();

  // The loss and accuracy of the step's whole batch (the last stages', part 0's
  // of each: the parts compute the same), the stop flag and, under loss scaling,
  // the stages' non-finite gradients: one all-reduce.
  Stopwatch metrics;
  nn::LossStats local;
  for (const nn::LossRows& r : rows)
    if (r.both.defined() && stats_.tensor == 0) nn::Loss::add_stats(r, local);
  float s[5] = {static_cast<float>(local.loss_sum), static_cast<float>(local.correct),
                static_cast<float>(local.count), stop_requested_ ? 1.0f : 0.0f,
                loss_scale_ ? static_cast<float>(count_non_finite_gradients(trainable_)) : 0.0f};
  workers_->all_reduce(s, 5, comm::ReduceOp::kSum);
  // (Every stage reads the same records: each knows the label positions per sample.)
  const auto samples_done = static_cast<int64_t>(s[2] + 0.5f);
  stats.add({s[0], static_cast<int64_t>(s[1] + 0.5f), samples_done, samples_done * batches[0].label_width});
  stop_agreed_ = s[3] > 0.0f;
  timings_.metrics_seconds += metrics.seconds();
  // A step with an inf or NaN on any stage is skipped everywhere (Keras' rule).
  const bool finite = !loss_scale_ || s[4] == 0.0f;
  Stopwatch update;
  const bool applied = update_step_->run(*sync_, finite, step);
  timings_.update_seconds += update.seconds();
  timings_.comm_wait_seconds += sync_->after_update(applied);
  if (loss_scale_) loss_scale_->update(finite);

  stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, step_memory_.peak(device_.type));
  const double seconds = step_time.seconds();
  // (the split layers' all-reduces ran inside forward and backward: communication, not compute)
  const double tensor_comm = tp_ ? tp_->comm_seconds() - tensor_comm_before : 0.0;
  timings_.comm_wait_seconds += tensor_comm;
  timings_.compute_seconds += busy - tensor_comm;
  timings_.step_seconds += seconds;
  timings_.steps += 1;
  stats_.busy_seconds += busy;
  stats_.step_seconds += seconds;
}

void PipelineStrategy::eval_step(const data::Batch& batch, nn::LossStats& stats) {
  const uint64_t tag = kEvalTag | (eval_calls_++ << 2);
  const nn::StepContext ctx{false, seed_, 0};
  const Tensor x =
      first_stage() ? batch.images.to(device_) : receive(batch.size(), stage_input_, stats_.stage - 1, tag);
  const Tensor out = model_->forward(x, ctx);
  float s[3] = {0.0f, 0.0f, 0.0f};
  if (last_stage()) {
    nn::LossRows rows;
    compute_loss(out, nn::labels_tensor(batch.labels, device_), nullptr, 0.0f, rows);
    nn::LossStats local;
    nn::Loss::add_stats(rows, local);
    s[0] = static_cast<float>(local.loss_sum);
    s[1] = static_cast<float>(local.correct);
    s[2] = static_cast<float>(local.count);
  } else {
    links_->send(out, stats_.stage + 1, tag);
  }
  links_->drain();
  // Every stage of the copy learns the batch's figures (the last stage's).
  pipe_->all_reduce(s, 3, comm::ReduceOp::kSum);
  const auto samples = static_cast<int64_t>(s[2] + 0.5f);
  stats.add({s[0], static_cast<int64_t>(s[1] + 0.5f), samples, samples * batch.label_width});
}

void PipelineStrategy::sync_state() {
  if (peers_->size() > 1)
    for (nn::Param* p : state_) peers_->all_reduce(p->value, comm::ReduceOp::kMean);
}

void PipelineStrategy::load_state(const TensorLookup& model, const TensorLookup& optimizer) {
  if (tp_) {  // this task's parts of the whole tensors
    tp_->load(model_->params(), model, "model");
    optimizer_->create_state(trainable_);
    tp_->load(optimizer_->state(), optimizer, "optimizer state");
    return;
  }
  load_named(model_->params(), model, "model");
  optimizer_->create_state(trainable_);
  load_named(optimizer_->state(), optimizer, "optimizer state");
}

double theoretical_bubble(int stages, int64_t micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

std::string PipelineStrategy::report_json() const {
  const double bubble = stats_.step_seconds > 0 ? 1.0 - stats_.busy_seconds / stats_.step_seconds : 0.0;
  return nlohmann::json{{"stage", stats_.stage},
                        {"stages", stats_.stages},
                        {"copy", stats_.copy},
                        {"data_parallel", stats_.copies},
                        {"tensor", stats_.tensor},
                        {"tensor_parallel", stats_.tensors},
                        {"tensor_split", stats_.tensor_split},
                        {"split", stats_.split},
                        {"split_how", stats_.split_how},
                        {"links", stats_.links},
                        {"micro_batches", micro_batches_},
                        {"schedule", schedule_ == PipelineSchedule::kGpipe ? "gpipe" : "1f1b"},
                        {"bubble", bubble},
                        {"theoretical_bubble", theoretical_bubble(stats_.stages, micro_batches_)},
                        {"recomputed_forwards", stats_.recomputed},
                        {"peak_inputs_held", stats_.peak_inputs_held},
                        {"peak_input_bytes", stats_.peak_input_bytes},
                        {"peak_activation_bytes", stats_.peak_activation_bytes}}
      .dump();
}

std::vector<StatePiece> PipelineStrategy::state_pieces() {
  std::vector<StatePiece> pieces;
  if (stats_.copy != 0) return pieces;  // the other copies hold the same values
  if (tp_) return tp_->pieces(model_->params(), optimizer_->state());  // (collective over the stage's parts)
  for (const nn::Param* p : model_->params()) pieces.push_back({p->name, p->value.shape(), 0, &p->value, false});
  for (const nn::Param* p : optimizer_->state()) pieces.push_back({p->name, p->value.shape(), 0, &p->value, true});
  return pieces;
}

std::string PipelineStrategy::stage_hash_input() {
  std::string input;
  const auto feed = [&input](const void* data, size_t size) { input.append(static_cast<const char*>(data), size); };
  if (tp_) tp_->whole_hash_input(model_->params(), feed);
  else model_->hash_input(feed);
  return input;
}

std::string PipelineStrategy::params_sha256() {
  // nn::Sequential::params_sha256 of the whole model: each later stage of copy 0
  // (its part 0, with its parts' split tensors gathered whole) sends the chief
  // the bytes its params add to the hash input (hash_input), and the chief
  // hashes them after its own, in stage order; the digest then goes to every task.
  const uint64_t tag = kHashTag | (hash_calls_++ << 2);
  std::string digest(64, '0');
  const std::string input = stats_.copy == 0 ? stage_hash_input() : std::string();
  if (stats_.copy == 0 && stats_.tensor == 0 && first_stage()) {
    Sha256 h;
    h.update(input.data(), input.size());
    for (int s = 1; s < stats_.stages; ++s) {
      float header[2];
      pipe_->recv(header, 2, s, tag);
      uint64_t bytes = 0;
      std::memcpy(&bytes, header, sizeof bytes);
      std::vector<float> blob(floats_for(bytes));
      pipe_->recv(blob.data(), blob.size(), s, tag | 1);
      h.update(blob.data(), bytes);
    }
    digest = h.hex_digest();
  } else if (stats_.copy == 0 && stats_.tensor == 0) {
    const uint64_t bytes = input.size();
    float header[2];
    std::memcpy(header, &bytes, sizeof bytes);
    pipe_->send(header, 2, 0, tag);
    std::vector<float> blob(floats_for(bytes), 0.0f);
    if (bytes > 0) std::memcpy(blob.data(), input.data(), bytes);  // an empty blob has no data() to copy into
    pipe_->send(blob.data(), blob.size(), 0, tag | 1);
  }
  float raw[16];
  static_assert(sizeof raw == 64);
  std::memcpy(raw, digest.data(), 64);
  workers_->broadcast(raw, 16, 0);
  return std::string(reinterpret_cast<const char*>(raw), 64);
}

}  // namespace dtrain::strategy
