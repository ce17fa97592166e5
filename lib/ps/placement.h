// Where a parameter_server job's variables live: split into shards by the
// partitioner (TF's MinSizePartitioner / MaxSizePartitioner /
// FixedShardsPartitioner, along the first axis) and each shard placed on one ps.
//
// Placement rule (every task computes the same from the model and the cluster):
// shards are taken largest first (ties in model order) and each goes to the ps
// holding the fewest bytes so far (ties: the lowest index). TF places
// round-robin in creation order; this balances bytes instead, so one large
// kernel does not land on the same ps as every other large kernel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace dtrain::ps {

// strategy.variable_partitioner.
struct PartitionerSpec {
  enum class Type { kNone, kMinSize, kMaxSize, kFixed };
  Type type = Type::kNone;    // kNone: every variable whole
  int64_t min_shard_bytes = 256 << 10;  // min_size
  int64_t max_shards = 0;               // min_size, max_size: at most this many parts (0: no cap)
  int64_t max_shard_bytes = 0;          // max_size
  int64_t num_shards = 1;               // fixed
};

// A variable as the model has it.
struct VariableInfo {
  std::string name;  // "dense/kernel"
  Shape shape;
  bool trainable = true;
};

// One shard: elements [offset, offset + count) of variable `variable` (whole rows
// of its first axis).
struct Shard {
  int variable = 0;  // index into the placement's variables
  int part = 0;      // which of the variable's parts
  int parts = 1;
  int64_t offset = 0;
  int64_t count = 0;
  int ps = 0;
  std::string name() const;  // unused outside messages: "dense/kernel" or "dense/kernel/part_1"
};

struct Placement {
  std::vector<VariableInfo> variables;
  std::vector<Shard> shards;                // in variable order, then part order
  std::vector<std::vector<int>> ps_shards;  // per ps: indices into shards, in that order
  int num_ps = 1;
  // Float32 elements one ps holds (the payload of a pull or push), and its trainable ones.
  int64_t ps_elements(int ps) const;
  // Floats of ps `ps`'s whole state: values, then `slots` optimizer slots per trainable element.
  int64_t ps_state_elements(int ps, int slots) const;
  std::string shard_name(const Shard& s) const;
  // The shard's shape: its variable's, with the rows it holds on the first axis.
  Shape shard_shape(const Shard& s) const;
  // One line per ps: "ps:0 holds 3 shards, 0.56 MB: dense/kernel, ...".
  std::string describe() const;
};

// How many parts the partitioner cuts a variable of `shape` (4-byte elements) into.
int64_t num_partitions(const PartitionerSpec& spec, const Shape& shape);

// Copies ps `ps`'s shards out of the variables' values (one pointer per
// variable, in placement order) into a flat payload, and back.
void gather_shards(const Placement& placement, int ps, const std::vector<const float*>& variables, float* out);
void scatter_shards(const Placement& placement, int ps, const float* in, const std::vector<float*>& variables);

// Splits and places the variables over `num_ps` ps tasks.
Placement plan_placement(const std::vector<VariableInfo>& variables, int num_ps, const PartitionerSpec& partitioner);

}  // namespace dtrain::ps
