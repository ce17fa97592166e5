// Implementation of ps_checkpoint.h.
#include "ps/ps_checkpoint.h"

#include <cstdio>

namespace dtrain::ps {

std::string shard_file_name(int ps, int num_ps) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ps-%05d-of-%05d.safetensors", ps, num_ps);
  return buf;
}

checkpoint::ShardedLayout checkpoint_layout(const Placement& placement, const std::vector<std::string>& slot_suffixes) {
  // The whole tensor of variable v (with `suffix`: its optimizer slot), from its shards.
  auto whole = [&](int v, const std::string& suffix) {
    checkpoint::ShardedTensor t{placement.variables[v].name + suffix, placement.variables[v].shape, {}};
    for (const Shard& s : placement.shards)
      if (s.variable == v)
        t.parts.push_back({shard_file_name(s.ps, placement.num_ps), placement.shard_name(s) + suffix, s.offset});
    return t;
  };
  checkpoint::ShardedLayout layout;
  const int variables = static_cast<int>(placement.variables.size());
  for (int v = 0; v < variables; ++v) layout.model.push_back(whole(v, ""));
  for (const std::string& suffix : slot_suffixes)
    for (int v = 0; v < variables; ++v)
      if (placement.variables[v].trainable) layout.optimizer.push_back(whole(v, suffix));
  return layout;
}

}  // namespace dtrain::ps
