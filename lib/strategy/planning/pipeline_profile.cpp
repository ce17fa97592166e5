// Implementation of pipeline_profile.h.
#include "strategy/planning/pipeline_profile.h"

#include "core/rng.h"
#include "nn/losses.h"

namespace dtrain::strategy {

std::vector<double> measure_layer_seconds(const StrategyJob& job, int64_t rows, int steps) {
  nn::Sequential model(job.model, job.train.seed);
  model.place(Device::cpu(), 0);
  const std::unique_ptr<nn::Loss> loss = nn::make_loss(job.loss);
  // Zeros: an input every model takes (token id 0 for an Embedding first layer,
  // which refuses ids that are not integers below its vocabulary); the kernels'
  // time does not depend on the values.
  Tensor x(nn::with_batch(rows, model.input_shape()));
  x.zero();
  Rng rng(job.train.seed);
  // A label per position of the output: one per sample for (classes,), T for (T, classes).
  const Shape& out = model.output_shape();
  const int64_t classes = out.empty() ? 1 : out.back();
  const int64_t positions = out.empty() ? 1 : shape_numel(out) / std::max<int64_t>(1, classes);
  std::vector<int32_t> labels(static_cast<size_t>(rows * positions));
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

StageSplit measured_split(const StrategyJob& job, comm::Communicator& workers, bool whole_model_fits,
                          const StageSplit& by_bytes) {
  float too_big = whole_model_fits ? 0.0f : 1.0f;  // on any task: all take the same split
  workers.all_reduce(&too_big, 1, comm::ReduceOp::kSum);
  if (too_big > 0.0f) return by_bytes;
  const size_t layers = nn::describe_layers(job.model).size();
  std::vector<float> cost(layers, 0.0f);
  if (workers.rank() == 0) {
    const std::vector<double> seconds =
        measure_layer_seconds(job, job.train.batch_size_per_replica / job.strategy.micro_batches, 3);
    for (size_t i = 0; i < cost.size(); ++i) cost[i] = static_cast<float>(seconds[i]);
  }
  workers.broadcast(cost.data(), cost.size(), 0);
  return balanced_split(std::vector<double>(cost.begin(), cost.end()), static_cast<int>(by_bytes.stages()),
                        "auto: measured time");
}

}  // namespace dtrain::strategy
