// Implementation of placement.h.
#include "ps/placement.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "core/strings.h"

namespace dtrain::ps {

std::string Shard::name() const { return parts == 1 ? std::string() : str("/part_", part); }

std::string Placement::shard_name(const Shard& s) const { return variables[s.variable].name + s.name(); }

Shape Placement::shard_shape(const Shard& s) const {
  Shape shape = variables[s.variable].shape;
  if (shape.empty() || shape[0] == 0) return shape;
  const int64_t row = shape_numel(shape) / shape[0];
  if (row > 0) shape[0] = s.count / row;
  return shape;
}

int64_t Placement::ps_elements(int ps) const {
  int64_t n = 0;
  for (int i : ps_shards[ps]) n += shards[i].count;
  return n;
}

int64_t Placement::ps_state_elements(int ps, int slots) const {
  int64_t n = 0;
  for (int i : ps_shards[ps]) n += shards[i].count * (variables[shards[i].variable].trainable ? 1 + slots : 1);
  return n;
}

std::string Placement::describe() const {
  std::string out;
  for (int p = 0; p < num_ps; ++p) {
    std::vector<std::string> names;
    for (int i : ps_shards[p]) names.push_back(shard_name(shards[i]));
    char mb[32];
    std::snprintf(mb, sizeof mb, "%.2f MB", static_cast<double>(ps_elements(p)) * 4.0 / 1e6);
    out += str("ps:", p, " holds ", names.size(), " shard(s), ", mb, names.empty() ? "" : ": ", join(names, ", "),
               "\n");
  }
  return out;
}

int64_t num_partitions(const PartitionerSpec& spec, const Shape& shape) {
  if (shape.empty()) return 1;
  const int64_t rows = shape[0];
  const int64_t bytes = shape_numel(shape) * 4;
  int64_t n = 1;
  switch (spec.type) {
    case PartitionerSpec::Type::kNone:
      return 1;
    case PartitionerSpec::Type::kMinSize:  // as many as keep every shard >= min_shard_bytes
      n = std::max<int64_t>(1, bytes / std::max<int64_t>(1, spec.min_shard_bytes));
      if (spec.max_shards > 0) n = std::min(n, spec.max_shards);
      break;
    case PartitionerSpec::Type::kMaxSize:  // as few as keep every shard <= max_shard_bytes
      n = (bytes + spec.max_shard_bytes - 1) / std::max<int64_t>(1, spec.max_shard_bytes);
      if (spec.max_shards > 0) n = std::min(n, spec.max_shards);
      break;
    case PartitionerSpec::Type::kFixed:
      n = spec.num_shards;
      break;
  }
  return std::clamp<int64_t>(n, 1, std::max<int64_t>(1, rows));
}

Placement plan_placement(const std::vector<VariableInfo>& variables, int num_ps, const PartitionerSpec& partitioner) {
  DT_CHECK(num_ps >= 1, "a placement needs a ps");
  Placement plan;
  plan.variables = variables;
  plan.num_ps = num_ps;
  for (size_t v = 0; v < variables.size(); ++v) {
    const Shape& shape = variables[v].shape;
    const int64_t parts = num_partitions(partitioner, shape);
    const int64_t rows = shape.empty() ? 1 : shape[0];
    const int64_t row_elements = rows > 0 ? shape_numel(shape) / rows : 0;
    int64_t row = 0;
    for (int64_t p = 0; p < parts; ++p) {
      // TF's rule: the first (rows % parts) parts take one row more.
      const int64_t take = rows / parts + (p < rows % parts ? 1 : 0);
      plan.shards.push_back({static_cast<int>(v), static_cast<int>(p), static_cast<int>(parts), row * row_elements,
                             take * row_elements, 0});
      row += take;
    }
  }
  std::vector<int> order(plan.shards.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return plan.shards[a].count > plan.shards[b].count; });
  std::vector<int64_t> load(static_cast<size_t>(num_ps), 0);
  for (int i : order) {
    const int ps = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    plan.shards[i].ps = ps;
    load[ps] += plan.shards[i].count;
  }
  plan.ps_shards.assign(static_cast<size_t>(num_ps), {});
  for (size_t i = 0; i < plan.shards.size(); ++i) plan.ps_shards[plan.shards[i].ps].push_back(static_cast<int>(i));
  return plan;
}

void gather_shards(const Placement& placement, int ps, const std::vector<const float*>& variables, float* out) {
  for (int i : placement.ps_shards[ps]) {
    const Shard& s = placement.shards[i];
    std::memcpy(out, variables[s.variable] + s.offset, static_cast<size_t>(s.count) * sizeof(float));
    out += s.count;
  }
}

void scatter_shards(const Placement& placement, int ps, const float* in, const std::vector<float*>& variables) {
  for (int i : placement.ps_shards[ps]) {
    const Shard& s = placement.shards[i];
    std::memcpy(variables[s.variable] + s.offset, in, static_cast<size_t>(s.count) * sizeof(float));
    in += s.count;
  }
}

}  // namespace dtrain::ps
