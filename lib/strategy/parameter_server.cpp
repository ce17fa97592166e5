// Implementation of parameter_server.h.
#include "strategy/parameter_server.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/ops.h"
#include "ps/ps_checkpoint.h"

namespace dtrain::strategy {

namespace {

ps::PsGroup& group_of(const StrategyContext& context) {
  if (!context.ps)
    throw ConfigError("strategy.type parameter_server needs a cluster with ps tasks: run the job with `dtrain launch "
                      "--ps 1 --workers 2 --chief` or give every task TF_CONFIG");
  return *context.ps;
}

std::vector<float*> value_pointers(const std::vector<nn::Param*>& params) {
  std::vector<float*> out;
  for (nn::Param* p : params) out.push_back(p->value.data());
  return out;
}

}  // namespace

ParameterServerStrategy::ParameterServerStrategy(const StrategyJob& job, const StrategyContext& context)
    : group_(group_of(context)),
      seed_(job.train.seed),
      loss_(nn::make_loss(job.loss)),
      model_(std::make_unique<nn::Sequential>(job.model, job.train.seed)),
      optimizer_(optim::make_optimizer(job.optimizer)),
      clipper_(job.optimizer) {
  if (!context.device.is_cpu())
    throw ConfigError(str("strategy.type parameter_server computes on the CPU in this version of dtrain, not on ",
                          context.device.str(), "; set \"device\": \"cpu\""));
  model_->place(Device::cpu(), optimizer_->slots_per_param());
  params_ = model_->params();
  trainable_ = model_->trainable_params();
  optimizer_->create_state(trainable_, model_->arena());
  DT_CHECK_EQ(group_.placement().variables.size(), params_.size());
  if (job.train.gradient_accumulation_steps > 1)
    for (nn::Param* p : trainable_) accumulated_.emplace_back(p->value.shape());
  for (nn::Param* p : params_) before_.emplace_back(p->trainable() ? Shape{0} : p->value.shape());
  payloads_.resize(static_cast<size_t>(group_.size()));
  for (int p = 0; p < group_.size(); ++p)
    payloads_[p].resize(static_cast<size_t>(group_.placement().ps_elements(p)));
}

ParameterServerStrategy::~ParameterServerStrategy() = default;

void ParameterServerStrategy::receive_values() {
  const trace::Span span("ps pull", "ps");
  version_ = group_.finish(values_);
  const std::vector<float*> targets = value_pointers(params_);
  for (int p = 0; p < group_.size(); ++p) ps::scatter_shards(group_.placement(), p, values_[p].data(), targets);
}

void ParameterServerStrategy::drain() {
  if (group_.pending()) receive_values();
}

void ParameterServerStrategy::train_step(const std::vector<data::Batch>& micro_batches, int64_t step,
                                         nn::LossStats& stats, const std::vector<data::Batch>*) {
  DT_CHECK(!micro_batches.empty(), "a step needs at least one micro-batch");
  Stopwatch timer;
  if (!group_.pending()) group_.start_pull();
  receive_values();  // the reply to the last push: usually here already
  const double waited = timer.seconds();
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i]->trainable()) before_[i].copy_from(params_[i]->value);

  const nn::StepContext ctx{true, hash_u64(seed_, static_cast<uint64_t>(clock_) + 1), step};
  const int64_t k = static_cast<int64_t>(micro_batches.size());
  for (int64_t m = 0; m < k; ++m) {
    const data::Batch& b = micro_batches[m];
    const Tensor output = model_->forward(b.images, ctx);
    if (!grad_output_.defined() || grad_output_.shape() != output.shape()) grad_output_ = Tensor(output.shape());
    nn::LossRows rows;
    loss_->compute(output, nn::labels_tensor(b.labels, Device::cpu()), &grad_output_,
                   1.0f / static_cast<float>(b.size() * k), rows);
    nn::Loss::add_stats(rows, stats);
    model_->backward(grad_output_);
    if (k > 1)
      for (size_t j = 0; j < trainable_.size(); ++j) {
        if (m < k - 1) kernels::axpy(1.0f, trainable_[j]->grad, accumulated_[j]);
        else {
          kernels::axpy(1.0f, accumulated_[j], trainable_[j]->grad);
          accumulated_[j].zero();
        }
      }
  }
  // Clipping (clipnorm, clipvalue, global_clipnorm) needs whole variables' norms,
  // and a ps holds only shards: clip here, before the push; the ps tasks' optimizers
  // do not clip (ShardStore). In sync mode the ps then averages clipped gradients.
  clipper_.clip(trainable_);
  // The push: gradients of the trainable variables; for the others (batch-norm
  // moving statistics) the change this step made, so that concurrent workers'
  // changes add up on the ps.
  std::vector<const float*> sources;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Param& p = *params_[i];
    if (p.trainable()) {
      sources.push_back(p.grad.data());
    } else {
      float* d = before_[i].data();
      const float* now = p.value.data();
      for (int64_t e = 0; e < p.value.numel(); ++e) d[e] = now[e] - d[e];
      sources.push_back(d);
    }
  }
  for (int p = 0; p < group_.size(); ++p) ps::gather_shards(group_.placement(), p, sources, payloads_[p].data());
  {
    const trace::Span span("ps push", "ps");
    group_.start_push(payloads_, clock_++);
  }
  timings_.steps += 1;
  timings_.comm_wait_seconds += waited;
  timings_.step_seconds += timer.seconds();
}

void ParameterServerStrategy::eval_step(const data::Batch& batch, nn::LossStats& stats) {
  const nn::StepContext ctx{false, seed_, 0};
  const Tensor output = model_->forward(batch.images, ctx);
  nn::LossRows rows;
  loss_->compute(output, nn::labels_tensor(batch.labels, Device::cpu()), nullptr, 0.0f, rows);
  nn::Loss::add_stats(rows, stats);
}

nn::Param* ParameterServerStrategy::slot(int k, int v) {
  const auto it = std::find(trainable_.begin(), trainable_.end(), params_[v]);
  if (it == trainable_.end()) return nullptr;
  const std::vector<nn::Param*> state = optimizer_->state();
  return state[static_cast<size_t>(k) * trainable_.size() + static_cast<size_t>(it - trainable_.begin())];
}

void ParameterServerStrategy::sync_state() {
  drain();
  const ps::Placement& plan = group_.placement();
  const int slots = optimizer_->slots_per_param();
  std::vector<std::vector<float>> states(static_cast<size_t>(group_.size()));
  for (int p = 0; p < group_.size(); ++p) states[p].resize(static_cast<size_t>(plan.ps_state_elements(p, slots)));
  version_ = group_.fetch_state(states);
  const std::vector<float*> targets = value_pointers(params_);
  for (int p = 0; p < group_.size(); ++p) {
    ps::scatter_shards(plan, p, states[p].data(), targets);
    const float* in = states[p].data() + plan.ps_elements(p);
    for (int k = 0; k < slots; ++k)
      for (int i : plan.ps_shards[p]) {
        const ps::Shard& s = plan.shards[i];
        if (nn::Param* slot_param = slot(k, s.variable)) {
          std::copy(in, in + s.count, slot_param->value.data() + s.offset);
          in += s.count;
        }
      }
  }
}

void ParameterServerStrategy::assign_to_ps(int64_t version) {
  const ps::Placement& plan = group_.placement();
  const int slots = optimizer_->slots_per_param();
  std::vector<const float*> sources;
  for (nn::Param* p : params_) sources.push_back(p->value.data());
  std::vector<std::vector<float>> states(static_cast<size_t>(group_.size()));
  for (int p = 0; p < group_.size(); ++p) {
    states[p].resize(static_cast<size_t>(plan.ps_state_elements(p, slots)));
    ps::gather_shards(plan, p, sources, states[p].data());
    float* out = states[p].data() + plan.ps_elements(p);
    for (int k = 0; k < slots; ++k)
      for (int i : plan.ps_shards[p]) {
        const ps::Shard& s = plan.shards[i];
        if (const nn::Param* slot_param = slot(k, s.variable)) {
          std::copy(slot_param->value.data() + s.offset, slot_param->value.data() + s.offset + s.count, out);
          out += s.count;
        }
      }
  }
  group_.assign_state(states, version);
  version_ = version;
}

checkpoint::ShardedLayout ParameterServerStrategy::checkpoint_layout() {
  // Slots are named "<variable>/<slot>" (optim::Optimizer::state()); the ps
  // tasks' optimizers name their shards' slots the same way.
  std::vector<std::string> suffixes;
  if (!trainable_.empty()) {
    const std::vector<nn::Param*> state = optimizer_->state();
    const std::string& first = trainable_[0]->name;
    for (size_t k = 0; k < state.size(); k += trainable_.size()) {
      DT_CHECK(state[k]->name.rfind(first, 0) == 0, "optimizer slot names start with their variable's");
      suffixes.push_back(state[k]->name.substr(first.size()));
    }
  }
  return ps::checkpoint_layout(group_.placement(), suffixes);
}

void ParameterServerStrategy::load_state(const TensorLookup& model, const TensorLookup& optimizer) {
  auto copy = [](const std::vector<nn::Param*>& into, const TensorLookup& lookup, const char* what) {
    for (nn::Param* p : into) {
      const Tensor* t = lookup(p->name);
      if (!t || t->shape() != p->value.shape())
        throw ConfigError(str("the checkpoint's ", what, " has no tensor '", p->name, "' of shape ",
                              shape_str(p->value.shape()), ": it was written for another model or optimizer"));
      p->value.copy_from(*t);
    }
  };
  copy(params_, model, "model");
  copy(optimizer_->state(), optimizer, "optimizer state");
}

}  // namespace dtrain::strategy
