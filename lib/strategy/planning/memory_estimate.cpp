// Implementation of memory_estimate.h: the model of what dtrain allocates for a task.
//
// What is counted, per replica (then times local_replicas, plus the central copy):
// - parameters: every Param's value (trainable and state), float32, as
//   Sequential::place lays them out in its arena;
// - gradients: one float32 tensor per trainable Param (the arena's second range);
// - optimizer slots: slots_per_param() float32 tensors per trainable Param (Adam's
//   m and v), or with optimizer_shards N a slice of shard_elements(T, N) elements
//   per slot (ZeRO-1);
// - ZeRO-2/3 (full_shard, over N tasks; strategy/sync/fully_sharded.h): each top-level
//   layer with trainable params is a unit of U floats (its tensors padded as in
//   the arena; consecutive layers up to min_unit_params parameters with it), each
//   task's chunk of it ceil(U / N). Gradients: the chunks, plus
//   3 of the largest unit (the one backward writes, the one being reduce-scattered
//   and the collectives' buffer); no accumulation buffer. ZeRO-2's parameters are
//   whole plus the chunks' copy; ZeRO-3's are the chunks plus the largest unit 3
//   times with prefetch (the layer running, the next one gathering, the last layer
//   kept from its forward to its backward), 2 without, at most once per unit,
//   and the state whole;
// - accumulation: with K > 1 micro-batches per update, one float32 buffer per
//   trainable Param (the strategies' `accumulated`);
// - weight copies: under mixed precision, Dense and Conv2D keep their kernel in the
//   compute dtype (refresh_compute_weights), and float32 Dense and
//   MultiHeadAttention layers theirs in the product dtype, with copies of the
//   operands they cast (nn::apply_model_dtype, as Sequential; the layers here are
//   on the CPU, so a GPU job, whose layers take float32 products, is over-counted
//   by those copies);
// - activations, what a forward pass leaves allocated for the backward pass, for
//   batches_in_flight batches of batch_rows rows, in each layer's compute dtype:
//   the input batch (float32); each layer's output tensor (Dense, Conv2D, pooling,
//   Activation, BatchNormalization, Dropout when its rate > 0; Flatten is a view,
//   Dropout at rate 0 passes its input on); Dropout's float32 mask; a Residual
//   block's sum (and its output after an activation) besides its children's; the
//   conversions Sequential makes where neighbouring layers compute in different
//   dtypes, and the float32 copy of a low-precision output for the loss. A layer's
//   input is the previous layer's output (Dense and Conv2D keep a reference to it),
//   so it is counted once; a pipeline stage's held_inputs more micro-batch inputs;
// - backward buffers, kept by the layers between steps and not multiplied by the
//   batches in flight: each layer's input gradient where it is computed (none below
//   the first layer with parameters, as Sequential::backward; BatchNormalization
//   always makes it), the gradient before a fused activation (Dense, Conv2D,
//   Residual), the dtype conversions of gradients, and the loss's float32 gradient
//   of the output.
// Left out: the arena's padding, the data pipeline's prefetched batches, oneDNN and
// cuDNN workspaces (max pooling's included), BatchNormalization's per-channel batch
// statistics, the loss's per-row figures, communication buffers and the allocator.
#include "strategy/planning/memory_estimate.h"

#include <algorithm>
#include <map>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "optim/optimizer.h"
#include "strategy/planning/tensor_split.h"
#include "tensor/arena.h"

namespace dtrain::strategy {
namespace {

constexpr int64_t kF32Bytes = 4;

int64_t bytes_of(DType dtype) { return static_cast<int64_t>(dtype_size(dtype)); }

std::string kind_list(const MemoryEstimate& e) {
  std::vector<std::string> parts;
  const auto add = [&parts](const char* what, int64_t bytes, bool always = false) {
    if (bytes > 0 || always) parts.push_back(str(what, " ", format_bytes(static_cast<double>(bytes))));
  };
  add("parameters", e.parameters, true);
  add("gradients", e.gradients, true);
  add("optimizer slots", e.optimizer_slots, true);
  add("accumulation", e.accumulation);
  add("weight copies", e.weight_copies);
  add("activations", e.activations, true);
  add("backward buffers", e.backward_buffers);
  return join(parts, ", ");
}

// "dense_1 (Dense) 64.0 MiB of parameters" or "conv2d (Conv2D) 98.0 MiB of activations".
std::string consumer(const LayerMemory& l) {
  const int64_t data = l.activation_bytes + l.backward_bytes;
  if (l.param_bytes + l.state_bytes >= data)
    return str(l.name, " (", l.type, ") ", format_bytes(static_cast<double>(l.param_bytes)), " of parameters",
               l.state_bytes > 0
                   ? str(" (", format_bytes(static_cast<double>(l.param_bytes + l.state_bytes)),
                         " with its gradients and optimizer slots)")
                   : std::string());
  return str(l.name, " (", l.type, ") ", format_bytes(static_cast<double>(data)), " of activations");
}

std::string biggest_list(const MemoryEstimate& e) {
  std::vector<std::string> parts;
  for (const LayerMemory& l : e.biggest(3)) parts.push_back(consumer(l));
  return join(parts, ", ");
}

}  // namespace

int64_t shard_elements(int64_t elements, int64_t shards) {
  if (shards <= 1) return elements;
  return TensorArena::padded((elements + shards - 1) / shards);
}

std::vector<LayerMemory> MemoryEstimate::biggest(size_t n) const {
  std::vector<LayerMemory> sorted = layers;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const LayerMemory& a, const LayerMemory& b) { return a.total_bytes() > b.total_bytes(); });
  if (sorted.size() > n) sorted.resize(n);
  while (!sorted.empty() && sorted.back().total_bytes() == 0) sorted.pop_back();
  return sorted;
}

namespace {

// Layer `index` of the model, built to read its sizes; a layer whose parameters
// cannot even be allocated here is a ConfigError naming it.
std::unique_ptr<nn::Layer> build_layer(const nn::LayerSpec& ls, const Shape& input, const std::string& name,
                                       int64_t index, std::map<std::string, int>& name_counts) {
  try {
    return nn::make_layer(ls, input, name, static_cast<uint64_t>(index), name_counts);
  } catch (const OutOfMemory& e) {
    throw ConfigError(str(ls.path, " (", name, "): its parameters alone do not fit in this machine's memory (",
                          e.what(), "); make the layer smaller, or split it over tasks (strategy.tensor_parallel, "
                          "strategy.shard \"parameters\")"));
  }
}

}  // namespace

MemoryEstimate estimate_memory(const MemoryQuery& q) {
  const nn::ModelSpec& spec = q.model;
  if (spec.layers.empty()) throw ConfigError(str(spec.path, ".layers: the model has no layers"));
  const auto count = static_cast<int64_t>(spec.layers.size());
  const int64_t first = q.first_layer;
  const int64_t last = q.last_layer < 0 ? count : q.last_layer;
  DT_CHECK(0 <= first && first < last && last <= count, "memory estimate of layers [", first, ", ", last, ") of ",
           count);
  DT_CHECK(q.batch_rows >= 1 && q.batches_in_flight >= 1 && q.optimizer_shards >= 1 && q.local_replicas >= 1 &&
               q.gradient_accumulation_steps >= 1,
           "memory estimate query out of range");

  MemoryEstimate e;
  const auto optimizer = optim::make_optimizer(q.optimizer);
  e.slots_on_ps = q.slots_on_ps;
  e.slots_per_param = q.slots_on_ps ? 0 : optimizer->slots_per_param();
  e.optimizer_name = optim::optimizer_type_of(q.optimizer).name;
  e.batch_rows = q.batch_rows;
  e.batches_in_flight = q.batches_in_flight;
  e.local_replicas = q.local_replicas;
  e.optimizer_shards = q.optimizer_shards;
  e.central_copy = q.central_copy;
  e.limit_bytes = q.limit_bytes;

  const int64_t n = q.batch_rows;
  const DType model_dtype = spec.compute_dtype;
  // One replica's figures; the forward ones for one batch.
  int64_t param_bytes = 0, trainable_elements = 0, copies = 0, forward = 0, backward = 0;
  int64_t held = 0;            // a pipeline stage's held micro-batch inputs
  int64_t largest_unit = 0, shard_floats = 0;  // ZeRO-2/3: the largest unit's trainable floats, the task's chunks
  int64_t open_unit = 0, open_params = 0;      // ZeRO-2/3: the unit being grouped (FullShard's min_unit_params)
  int64_t units = 0;
  const int64_t full = q.full_shard.empty() ? 1 : q.full_shards;
  bool params_below = false;   // a layer of the range before this one has params
  DType h_dtype = DType::kF32;  // the dtype of the activation flowing into the next layer
  Shape shape(spec.input_shape.begin(), spec.input_shape.end());
  std::map<std::string, int> name_counts;
  const std::vector<SplitLayer> tensor_split =
      tensor_split_plan(spec, static_cast<int>(q.tensor_parallel), q.tensor_whole, q.tensor_vocabulary_loss,
                        q.tensor_stage_starts);
  const UnfilledTensors shapes_only;  // (the layers' values are never read here)
  for (int64_t i = 0; i < last; ++i) {
    const nn::LayerSpec& ls = spec.layers[static_cast<size_t>(i)];
    const std::string name = ls.name.empty() ? nn::auto_layer_name(ls.type_name(), name_counts) : ls.name;
    // Built one at a time (names and shapes depend on the layers before), and dropped.
    const std::unique_ptr<nn::Layer> layer = build_layer(ls, shape, name, i, name_counts);
    const Shape input = shape;
    shape = layer->output_shape();  // (the whole layer's: what the next one is built for)
    if (!tensor_split.empty()) split_layers({layer.get()}, tensor_split, static_cast<int>(q.tensor_parallel), 0, [](Tensor&) {});
    if (i < first) continue;
    if (i == first) forward += n * shape_numel(input) * kF32Bytes;  // the input batch
    if (i == first) held = q.held_inputs * n * shape_numel(input) * kF32Bytes;

    nn::apply_model_dtype(*layer, model_dtype);  // (as Sequential does: products in bfloat16 too)
    const DType dtype = layer->compute_dtype();
    LayerMemory row;
    row.name = layer->name();
    row.type = layer->type();
    int64_t unit = 0;  // its trainable floats, padded as in the arena
    for (const nn::Param* p : layer->params()) {
      row.param_bytes += p->value.numel() * kF32Bytes;
      if (p->trainable()) {
        row.trainable_bytes += p->value.numel() * kF32Bytes;
        trainable_elements += p->value.numel();
        unit += TensorArena::padded(p->value.numel());
      }
    }
    if (unit > 0) {  // (grouped as FullShard groups: until min_unit_params parameters)
      open_unit += unit;
      open_params += row.trainable_bytes / kF32Bytes;
      if (open_params >= q.min_unit_params) {
        largest_unit = std::max(largest_unit, open_unit);
        shard_floats += (open_unit + full - 1) / full;
        open_unit = open_params = 0;
        ++units;
      }
    }
    const int64_t layer_copies = layer->weight_copy_bytes(dtype);
    const bool need_dx = q.needs_input_gradient || params_below;
    const nn::LayerBuffers b = layer->buffers(n, dtype, need_dx);
    row.activation_bytes = b.forward * q.batches_in_flight;
    row.backward_bytes = b.backward;
    // The layer's share of gradients, slots (of this task's shard) and accumulation.
    const int64_t slot_share = row.trainable_bytes * e.slots_per_param / q.optimizer_shards;
    row.state_bytes = row.trainable_bytes + slot_share + layer_copies +
                      (q.gradient_accumulation_steps > 1 ? row.trainable_bytes : 0);
    if (full > 1) row.state_bytes = row.trainable_bytes / full + slot_share;  // its chunk of the gradients, its slots

    // Sequential converts the activation into the layer's dtype (kept: the layer
    // may keep its input), and converts the gradient coming down into it.
    if (h_dtype != dtype) {
      forward += n * shape_numel(input) * bytes_of(dtype);
      if (need_dx) backward += n * shape_numel(input) * bytes_of(h_dtype);
    }
    h_dtype = dtype;
    param_bytes += row.param_bytes;
    if (full > 1 && q.full_shard == "parameters")  // (the row's: its chunk of the trainable values)
      row.param_bytes -= row.trainable_bytes - row.trainable_bytes / full;
    copies += layer_copies;
    forward += b.forward;
    backward += b.backward;
    if (!layer->params().empty()) params_below = true;
    e.layers.push_back(std::move(row));
  }
  largest_unit = std::max(largest_unit, open_unit);  // (a last unit below the size)
  shard_floats += (open_unit + full - 1) / full;
  if (open_unit > 0) ++units;
  const int64_t out = n * shape_numel(shape);
  if (h_dtype != DType::kF32) {
    forward += out * kF32Bytes;              // the output in float32 for the loss
    backward += out * bytes_of(h_dtype);     // its gradient in the last layer's dtype
  }
  backward += out * kF32Bytes;  // the loss's gradient of the output

  const int64_t trainable_bytes = trainable_elements * kF32Bytes;
  const int64_t slot_bytes = e.slots_per_param * shard_elements(trainable_elements, q.optimizer_shards) * kF32Bytes;
  const int64_t r = q.local_replicas;
  e.parameters = param_bytes * r;
  e.gradients = trainable_bytes * r;
  e.optimizer_slots = slot_bytes * r;
  e.accumulation = q.gradient_accumulation_steps > 1 ? trainable_bytes * r : 0;
  e.weight_copies = copies * r;
  e.activations = (forward * q.batches_in_flight + held) * r;
  e.backward_buffers = backward * r;
  if (q.central_copy) {
    e.parameters += param_bytes;
    e.gradients += trainable_bytes;
    e.optimizer_slots += e.slots_per_param * trainable_elements * kF32Bytes;
  }
  if (!q.full_shard.empty()) {
    DT_CHECK(r == 1 && !q.central_copy, "ZeRO-2/3 hold one replica");
    e.gradients = (shard_floats + 3 * largest_unit) * kF32Bytes;
    e.accumulation = 0;
    e.parameters = q.full_shard == "parameters"
                       ? param_bytes - trainable_bytes +
                             (shard_floats + std::min<int64_t>(q.prefetch ? 3 : 2, units) * largest_unit) * kF32Bytes
                       : param_bytes + shard_floats * kF32Bytes;
  }
  e.full_shard = q.full_shard;
  e.param_count = param_bytes / kF32Bytes;
  e.total = e.parameters + e.gradients + e.optimizer_slots + e.accumulation + e.weight_copies + e.activations +
            e.backward_buffers;
  return e;
}

std::string describe(const MemoryEstimate& e) {
  std::vector<std::string> how;
  how.push_back(str(e.param_count, " parameters"));
  if (e.slots_on_ps)
    how.push_back(str(e.optimizer_name, " on the ps tasks (its slots are theirs)"));
  else
    how.push_back(str(e.optimizer_name, " with ", e.slots_per_param, " slot(s) per parameter",
                      e.optimizer_shards > 1 ? str(" sharded over ", e.optimizer_shards, " tasks") : std::string(),
                      e.full_shard.empty() ? std::string() : str(" with the ", e.full_shard, " (strategy.shard)")));
  how.push_back(str("batches of ", e.batch_rows, " rows",
                    e.batches_in_flight > 1 ? str(" (", e.batches_in_flight, " in flight)") : std::string()));
  if (e.local_replicas > 1) how.push_back(str(e.local_replicas, " replicas"));
  if (e.central_copy) how.push_back("a central copy");
  std::string out = str("Memory per task (estimate): ", format_bytes(static_cast<double>(e.total)),
                        e.limit_bytes > 0 ? str(" (limit ", format_bytes(static_cast<double>(e.limit_bytes)), ")")
                                          : std::string(" (no runtime.memory_limit)"),
                        " for ", join(how, ", "), "\n");
  out += str("  ", kind_list(e), "\n");
  const std::string biggest = biggest_list(e);
  if (!biggest.empty()) out += str("  biggest layers: ", biggest, "\n");
  return out;
}

std::string memory_limit_problem(const MemoryEstimate& e) {
  if (e.limit_bytes <= 0 || e.total <= e.limit_bytes) return "";
  std::vector<std::string> fixes;
  const bool activations_first = e.activations + e.backward_buffers > e.parameters + e.gradients + e.optimizer_slots;
  if (activations_first) fixes.push_back("use a smaller batch (train.batch_size_per_replica)");
  fixes.push_back("shard the model with strategy.type \"pipeline\"");
  if (e.optimizer_shards <= 1 && e.optimizer_slots > 0)
    fixes.push_back("the optimizer state with strategy.shard (\"optimizer_state\", \"gradients\" or "
                    "\"parameters\": multi_worker_mirrored)");
  if (e.local_replicas > 1) fixes.push_back("use fewer strategy.replicas in one process");
  if (!activations_first) fixes.push_back("use a smaller batch");
  std::string fix = fixes.front();
  for (size_t i = 1; i < fixes.size(); ++i) fix += (i + 1 == fixes.size() ? ", or " : ", ") + fixes[i];
  const std::string biggest = biggest_list(e);
  return str("this task needs an estimated ", format_bytes(static_cast<double>(e.total)), " (", kind_list(e),
             biggest.empty() ? std::string() : str("; biggest: ", biggest), ") but the limit is ",
             format_bytes(static_cast<double>(e.limit_bytes)), "; ", fix);
}

}  // namespace dtrain::strategy
