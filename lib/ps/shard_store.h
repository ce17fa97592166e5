// ShardStore: the variables one ps task holds (its shards of the placement) and
// the optimizer that updates them, with its slots beside each shard. The ps's
// initial values are the model's own (same model spec and seed as every task).
// The optimizer never clips here: the workers clip whole gradients before they
// push (the spec's clipnorm, clipvalue and global_clipnorm are ignored).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "checkpoint/manifest.h"
#include "nn/model_spec.h"
#include "nn/layer.h"
#include "optim/optimizer.h"
#include "ps/placement.h"

namespace dtrain::ps {

// The model's variables, in params() order, for a placement.
std::vector<VariableInfo> model_variables(const nn::ModelSpec& model, uint64_t seed);

class ShardStore {
 public:
  ShardStore(const Placement& placement, int ps, const nn::ModelSpec& model, uint64_t seed,
             const optim::OptimizerSpec& optimizer);
  // Initial values given directly: one pointer per variable of the placement
  // (`dtrain bench ps` serves variables that belong to no model).
  ShardStore(const Placement& placement, int ps, const std::vector<const float*>& initial_values,
             const optim::OptimizerSpec& optimizer);
  ~ShardStore();

  int64_t elements() const { return elements_; }  // floats of a pull / push payload
  int64_t state_elements() const;                 // floats of a fetch / assign payload
  int slots() const { return slots_; }

  // The values of every shard, concatenated in the placement's order for this ps.
  void write_values(float* out) const;
  // One update as step `step` (0-based) from a push payload times `scale`: the
  // trainable shards get it as their gradient, the others (batch-norm moving
  // statistics) add it to their value.
  void apply(const float* payload, float scale, int64_t step);
  // Values, then slot k of every trainable shard for k = 0..slots-1.
  void write_state(float* out) const;
  void read_state(const float* in);

  // Writes this ps's shards and their optimizer slots, named as the placement
  // names them ("dense/kernel/part_1", "dense/kernel/part_1/m"), into
  // `dir`/shard_file_name(ps, num_ps) and fsyncs it (ps_checkpoint.h). `step`
  // and `version` go into the file's metadata. Returns the file's digest;
  // IoError when it cannot be written.
  checkpoint::FileDigest save(const std::string& dir, int64_t step, int64_t version) const;
  std::string file_name() const;

 private:
  void init(const Placement& placement, int ps, const std::vector<const float*>& values);

  int ps_ = 0, num_ps_ = 1;
  std::vector<Shape> shapes_;                        // each shard's shape (Placement::shard_shape)
  std::vector<Shape> trainable_shapes_;              // the trainable shards' (their slots' shapes)
  std::vector<std::unique_ptr<nn::Param>> params_;  // one per shard, in order (flat)
  std::vector<nn::Param*> trainable_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  int slots_ = 0;
  int64_t elements_ = 0;
  int64_t trainable_elements_ = 0;
};

}  // namespace dtrain::ps
