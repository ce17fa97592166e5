// The memory a training task holds, accounted from the model, not guessed: the
// bytes of parameters, gradients, optimizer slots, the accumulation buffer and the
// activations that dtrain's own code allocates for one task (runtime.memory_limit
// checks the total before training; the run prints it and the summary records it).
//
// It is a model of dtrain's buffers, documented in memory_estimate.cpp, not a
// measurement: allocator overheads, the arena's 256-byte padding per tensor, the
// data pipeline's prefetched batches, oneDNN/cuDNN workspaces and the
// communicators' buffers are left out. The job-to-query mapping (which strategy
// holds what) lives in trainer/setup/job_setup.h, since lib/job sits above strategy.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "nn/model_spec.h"
#include "optim/optimizer_spec.h"

namespace dtrain::strategy {

// What one task holds: which layers of which model, how many rows of a batch go
// through them at once, and how the state is copied or split.
struct MemoryQuery {
  nn::ModelSpec model;           // its compute_dtype: bfloat16 activations are 2 bytes
  optim::OptimizerSpec optimizer;  // its slots per parameter (Adam: 2)
  // The layers this task holds, [first_layer, last_layer) of model.layers; -1 = to the end.
  int64_t first_layer = 0;
  int64_t last_layer = -1;
  int64_t batch_rows = 32;         // rows of one batch going through the layers at once
  int64_t batches_in_flight = 1;   // batches whose activations are held at the peak (a pipeline stage's micro-batches)
  // The first layer computes the gradient of its input too (a pipeline stage after
  // the first sends it upstream); else, as in Sequential::backward, no input
  // gradient is computed below the first layer with parameters.
  bool needs_input_gradient = false;
  // A pipeline stage: the inputs of this many more micro-batches are held (their
  // forwards are run again before their backwards), float32, batch_rows rows each.
  int64_t held_inputs = 0;
  int64_t optimizer_shards = 1;    // ZeRO-1: slots split over this many tasks (each holds a padded 1/N slice)
  // strategy.shard "gradients" (ZeRO-2) / "parameters" (ZeRO-3) over this many
  // tasks (fully_sharded.h): 1/N of the gradients (and parameters), the slots of
  // that 1/N, and the layers whole only while in flight. The mode's name, "" for none.
  std::string full_shard;
  int64_t full_shards = 1;
  bool prefetch = true;             // ZeRO-3: one more layer gathered while one computes
  int64_t min_unit_params = 0;      // ZeRO-2/3: layers grouped into units of at least this many parameters
  // strategy.tensor_parallel: the layers its plan splits hold their part 1/T
  // (parameters, gradients, slots and the activations of the split width).
  int64_t tensor_parallel = 1;
  std::set<std::string> tensor_whole;  // strategy.tensor_split's layers kept whole
  bool tensor_vocabulary_loss = false;  // the loss takes split logits (vocabulary_loss.h)
  std::vector<size_t> tensor_stage_starts;  // a pipeline's stage starts (a Dense pair cut by one stays whole)
  int64_t gradient_accumulation_steps = 1;  // K > 1: one float32 accumulation buffer per trainable parameter
  int64_t local_replicas = 1;      // replicas in this process, each with its own params, grads, slots, activations
  // central_storage: one more copy of the parameters, gradients and optimizer
  // slots, the central variables on the host.
  bool central_copy = false;
  // parameter_server: the optimizer and its slots live on the ps tasks; a worker
  // (and the coordinator) holds none.
  bool slots_on_ps = false;
  int64_t limit_bytes = 0;         // runtime.memory_limit (0 = none), carried into the estimate for messages
};

// One layer's share (one replica, one copy), for naming the biggest consumers.
struct LayerMemory {
  std::string name;  // "dense_1"
  std::string type;  // "Dense"
  int64_t param_bytes = 0;      // its parameters, trainable and state, float32
  int64_t trainable_bytes = 0;  // the trainable part of param_bytes
  int64_t state_bytes = 0;      // with its gradients, optimizer slots (this task's share), accumulation and weight copies
  int64_t activation_bytes = 0;  // what its forward keeps, for batches_in_flight batches
  int64_t backward_bytes = 0;   // the gradient buffers its backward keeps
  int64_t total_bytes() const { return param_bytes + state_bytes + activation_bytes + backward_bytes; }
};

// The task's bytes by kind; every figure counts all local replicas (and the
// central copy). total is their sum.
struct MemoryEstimate {
  int64_t parameters = 0;       // trainable parameters and non-trainable state (moving statistics), float32
  int64_t gradients = 0;        // one float32 gradient per trainable parameter
  int64_t optimizer_slots = 0;  // slots per parameter x trainable parameters (this task's shard)
  int64_t accumulation = 0;     // gradient accumulation buffers (K > 1)
  int64_t weight_copies = 0;    // the kernels' low-precision copies (mixed precision)
  int64_t activations = 0;      // what forward keeps for backward, and the input batch
  int64_t backward_buffers = 0;  // the gradients of activations that the layers keep between steps
  int64_t total = 0;

  int64_t param_count = 0;      // parameters of one replica (trainable and state)
  int slots_per_param = 0;       // held in this task (0 with slots_on_ps)
  bool slots_on_ps = false;
  std::string optimizer_name;   // "adam"
  int64_t batch_rows = 0;
  int64_t batches_in_flight = 1;
  int64_t local_replicas = 1;
  int64_t optimizer_shards = 1;
  std::string full_shard;        // "gradients" / "parameters" (ZeRO-2/3 over optimizer_shards tasks), else ""
  bool central_copy = false;
  int64_t limit_bytes = 0;      // from the query (0 = none)
  std::vector<LayerMemory> layers;  // the task's layers, in model order

  // The layers with the largest total_bytes, largest first (at most `n`).
  std::vector<LayerMemory> biggest(size_t n) const;
};

// Builds the query's layers one at a time (to learn their parameter shapes and
// output shapes; only one layer is held at once) and adds up what the task holds.
// ConfigError for a model that does not build (the same errors as Sequential's).
MemoryEstimate estimate_memory(const MemoryQuery& query);

// A few lines for logs: "Memory per task (estimate): 565.0 MiB (limit 2.0 GiB)",
// then the figures by kind and the biggest layers.
std::string describe(const MemoryEstimate& estimate);

// Why the estimate does not fit its limit_bytes, naming the figures, the biggest
// layers and what to change; "" when it fits (or there is no limit). The text
// follows "runtime.memory_limit: ".
std::string memory_limit_problem(const MemoryEstimate& estimate);

// The elements of one task's slice when `elements` are split over `shards` tasks:
// ceil(elements / shards) rounded up to the arena's alignment (64 floats); all
// of them for one shard.
int64_t shard_elements(int64_t elements, int64_t shards);

}  // namespace dtrain::strategy
