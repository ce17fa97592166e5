// A parameter_server job's checkpoint files. Each ps task writes its own shards
// (their values, and the optimizer's slots beside them) into one safetensors file
// of the checkpoint's temporary directory, when the coordinator asks it to
// (PsGroup::save); the coordinator then writes the manifest, whose sharded layout
// says which tensor of which file holds which elements of each whole variable, so
// `CheckpointStore::load` gives whole tensors with the model's (Keras) names:
//
//   ps-00000-of-00002.safetensors   dense/kernel/part_0 [392,128], dense/kernel/part_0/m, ...
//   ps-00001-of-00002.safetensors   dense/kernel/part_1 [392,128], dense/bias [128], ...
#pragma once

#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "ps/placement.h"

namespace dtrain::ps {

// "ps-00000-of-00002.safetensors" for ps 0 of 2.
std::string shard_file_name(int ps, int num_ps);

// The layout of the files the ps tasks write for `placement`: the model's
// variables in order, then slot k of every trainable variable for each
// `slot_suffixes[k]` ("/m", "/v": optimizer slots are named "<variable>/<slot>").
checkpoint::ShardedLayout checkpoint_layout(const Placement& placement, const std::vector<std::string>& slot_suffixes);

}  // namespace dtrain::ps
