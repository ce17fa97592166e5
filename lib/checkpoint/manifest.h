// The manifest of one checkpoint (manifest.json): where training stood, what the
// job was, and a SHA-256 and size per file so a corrupt checkpoint is detected.
// A sharded checkpoint (parameter_server: each ps task writes its own shards into
// its own file) also says how its parts make the whole tensors again.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtrain::checkpoint {

struct FileDigest {
  std::string sha256;  // lower-case hex
  uint64_t bytes = 0;
};

// One part of a sharded tensor: elements [offset, offset + its element count) of
// the whole tensor (row-major), stored as tensor `tensor` of the checkpoint's file `file`.
struct TensorPart {
  std::string file;
  std::string tensor;
  int64_t offset = 0;
};

// A whole tensor as its parts make it ("dense/kernel", the name model.safetensors would use).
struct ShardedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<TensorPart> parts;
};

// The tensors of a sharded checkpoint, in order; empty for a checkpoint whose
// model.safetensors and optimizer.safetensors hold the whole tensors.
struct ShardedLayout {
  std::vector<ShardedTensor> model;
  std::vector<ShardedTensor> optimizer;
  bool empty() const { return model.empty() && optimizer.empty(); }
};

struct Manifest {
  int64_t step = 0;          // global steps completed
  int64_t epoch = 0;         // epoch the next step belongs to
  int64_t samples_seen = 0;  // position in the (global) data stream
  int world_size = 1;
  std::string config_sha256;  // hash of the job's agreement_json
  std::string rng_json = "{}";  // a JSON object of RNG / seed state, defined by the caller
  std::string dtrain_version;   // filled in by save() when empty
  std::map<std::string, FileDigest> files;  // filled in by save()
  ShardedLayout sharded;  // empty unless the tensors are in parts (CheckpointStore::save_sharded)
};

// manifest.json text (pretty-printed, keys sorted). rng_json must be a JSON object.
std::string manifest_to_json(const Manifest& manifest);
// The manifest's position, job and files as one JSON object's text, keys in this
// order: step, epoch, samples_seen, world_size, config_sha256, dtrain_version,
// files ({name: {bytes, sha256}}), sharded (true when the tensors are in parts);
// no format marker, no rng and not the parts. What `dtrain ckpt inspect --json`
// reports of a manifest.
std::string manifest_summary_json(const Manifest& manifest);
// Parses manifest.json text; IoError naming `source` and the bad field.
Manifest manifest_from_json(const std::string& text, const std::string& source);

}  // namespace dtrain::checkpoint
