// Implementation of clipping.h: the clipping keys' reader and the clipper, whose
// work is three kernels (ops.h): sum_of_squares per gradient into a small tensor
// on the gradients' device, then clip_by_norm (each gradient by its own sum, or
// by all of them for the global norm) or clip_by_value.
#include "optim/clipping.h"

#include <string>

#include "core/strings.h"
#include "kernels/ops.h"

namespace dtrain::optim {

const std::vector<config::KeyDoc>& clipping_keys() {
  static const std::vector<config::KeyDoc> keys = {
      {"clipnorm", "off; > 0: each param's gradient scaled to norm <= clipnorm"},
      {"clipvalue", "off; > 0: each gradient element clipped to [-clipvalue, clipvalue]"},
      {"global_clipnorm", "off; > 0: all gradients scaled together to a global norm <= global_clipnorm"},
  };
  return keys;
}

void read_clipping(config::Section& r, OptimizerSpec& spec) {
  spec.clipnorm = r.get_double("clipnorm", spec.clipnorm, config::kPositive);
  spec.clipvalue = r.get_double("clipvalue", spec.clipvalue, config::kPositive);
  spec.global_clipnorm = r.get_double("global_clipnorm", spec.global_clipnorm, config::kPositive);
  std::vector<std::string> set;
  if (spec.clipnorm > 0.0) set.push_back("'clipnorm'");
  if (spec.clipvalue > 0.0) set.push_back("'clipvalue'");
  if (spec.global_clipnorm > 0.0) set.push_back("'global_clipnorm'");
  if (set.size() > 1) {
    const std::string last = set.back().substr(1, set.back().size() - 2);
    r.fail(last, str("only one of 'clipnorm', 'clipvalue' and 'global_clipnorm' may be set (Keras raises too), "
                     "got ", config::join_and(set), "; keep one of them"));
  }
}

bool clips(const OptimizerSpec& spec) {
  return spec.clipnorm > 0.0 || spec.clipvalue > 0.0 || spec.global_clipnorm > 0.0;
}

OptimizerSpec without_clipping(OptimizerSpec spec) {
  spec.clipnorm = spec.clipvalue = spec.global_clipnorm = 0.0;
  return spec;
}

OptimizerSpec without_norm_clipping(OptimizerSpec spec) {
  spec.clipnorm = spec.global_clipnorm = 0.0;
  return spec;
}

GradientClipper::GradientClipper(const OptimizerSpec& spec)
    : clipnorm_(spec.clipnorm), clipvalue_(spec.clipvalue), global_clipnorm_(spec.global_clipnorm) {}

void GradientClipper::clip(const std::vector<nn::Param*>& params) {
  if (!active() || params.empty()) return;
  if (clipvalue_ > 0.0) {
    for (nn::Param* p : params) kernels::clip_by_value(p->grad, static_cast<float>(clipvalue_));
    return;
  }
  const int64_t n = static_cast<int64_t>(params.size());
  const Device device = params[0]->grad.device();
  if (!squares_.defined() || squares_.numel() != n || squares_.device() != device) squares_ = Tensor({n}, device);
  for (int64_t i = 0; i < n; ++i) {
    Tensor sum = squares_.flat_slice(i, 1);
    kernels::sum_of_squares(params[i]->grad, sum);
  }
  // Every sum first: the global norm needs all of them before any gradient changes.
  for (int64_t i = 0; i < n; ++i) {
    if (clipnorm_ > 0.0)
      kernels::clip_by_norm(params[i]->grad, squares_.flat_slice(i, 1), static_cast<float>(clipnorm_));
    else
      kernels::clip_by_norm(params[i]->grad, squares_, static_cast<float>(global_clipnorm_));
  }
}

}  // namespace dtrain::optim
