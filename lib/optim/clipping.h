// Gradient clipping: Keras' base-optimizer options, keys of every optimizer.
//
//   clipnorm:         g = g * clipnorm / max(norm(g), clipnorm)                for each param's gradient
//   global_clipnorm:  g = g * global_clipnorm / max(global_norm, global_clipnorm), global_norm the
//                     norm of all the gradients together
//   clipvalue:        g = min(max(g, -clipvalue), clipvalue)                    element-wise
//
// At most one of them is set (Keras raises otherwise). Optimizer::apply clips the
// gradients it is given, so the strategies clip the aggregated gradient (after the
// all-reduce, or the central average). parameter_server: a ps holds only shards of
// a variable, so the worker clips its whole gradients before the push
// (ParameterServerStrategy) and the ps's optimizer clips nothing (without_clipping).
#pragma once

#include <vector>

#include "nn/layer.h"
#include "optim/optimizer_spec.h"

namespace dtrain::optim {

// The clipping keys with their docs (for the reference and the reader).
const std::vector<config::KeyDoc>& clipping_keys();
// Reads the clipping keys of an optimizer object into `spec`; ConfigError
// naming the keys when more than one is set.
void read_clipping(config::Section& r, OptimizerSpec& spec);
// True when `spec` clips gradients.
bool clips(const OptimizerSpec& spec);
// `spec` with clipping off (a ps's optimizer: its workers clipped already).
OptimizerSpec without_clipping(OptimizerSpec spec);
// `spec` without clipnorm and global_clipnorm (clipvalue kept): for a strategy
// whose tasks hold parts of the gradients and clip by the norms over all of them
// (strategy/sync/shard_pieces.h).
OptimizerSpec without_norm_clipping(OptimizerSpec spec);

// Clips gradients in place as a spec says, with kernels on the gradients' device:
// the norms stay on that device, so the host never waits for a GPU.
class GradientClipper {
 public:
  explicit GradientClipper(const OptimizerSpec& spec);
  bool active() const { return clipnorm_ > 0.0 || clipvalue_ > 0.0 || global_clipnorm_ > 0.0; }
  // Clips the gradients of `params` (every one with a grad, all on one device).
  void clip(const std::vector<nn::Param*>& params);

 private:
  double clipnorm_ = 0.0, clipvalue_ = 0.0, global_clipnorm_ = 0.0;
  Tensor squares_;  // (params): each gradient's sum of squares, on the gradients' device
};

}  // namespace dtrain::optim
