// CheckpointStore: a directory of checkpoints, each saved atomically.
//
//   <dir>/ckpt-00000100/  model.safetensors  optimizer.safetensors  manifest.json  DONE
//
// save() writes into <dir>/.tmp-ckpt-<step>-<random>/, fsyncs every file and the
// directory, renames it to ckpt-<step 8 digits>, fsyncs <dir>, and only then writes
// DONE (holding manifest.json's SHA-256). A crash at any moment therefore leaves
// the earlier checkpoints untouched, and a half-saved one has no DONE. After a
// save the newest `keep` checkpoints with DONE remain (the others, leftover temp
// directories and incomplete older checkpoints are removed).
//
// A checkpoint is "good" when it has DONE, its manifest matches DONE's hash and
// every file matches the manifest's size and SHA-256.
//
// A sharded checkpoint (save_sharded: parameter_server, where each ps task writes
// its own shards) has, instead of model.safetensors and optimizer.safetensors, the
// files others wrote into the temporary directory, and the manifest's `sharded`
// layout; load() puts the whole tensors together again (only the wanted ones, when
// asked: see load(path, wanted)), so a reader never sees the difference:
//
//   <dir>/ckpt-00000100/  ps-00000-of-00002.safetensors  ps-00001-of-00002.safetensors  manifest.json  DONE
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "nn/layer.h"

namespace dtrain::checkpoint {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kDoneFile = "DONE";

// IoError "<prefix>no such checkpoint directory: DIR<if_missing>" when `dir` is
// not there; when it is a file, one that says to name a directory (a store such as
// out/checkpoints, or one ckpt-* inside it).
void require_checkpoint_directory(const std::string& dir, const std::string& prefix, const std::string& if_missing);

// Views of params' values (host float32), named as the params are.
std::vector<TensorRef> tensor_refs(const std::vector<nn::Param*>& params);

// A checkpoint read back by load().
struct LoadedCheckpoint {
  std::string path;
  Manifest manifest;
  SafetensorsFile model;
  SafetensorsFile optimizer;
};

// One ckpt-* directory as list() sees it.
struct CheckpointEntry {
  std::string path;
  int64_t step = 0;
  std::string problem;  // "" when good
  bool good() const { return problem.empty(); }
};

class CheckpointStore {
 public:
  // `dir` is created on the first save. keep >= 1.
  explicit CheckpointStore(std::string dir, int keep = 3);

  const std::string& dir() const { return dir_; }

  // Saves one checkpoint (manifest.files and an empty dtrain_version are filled in)
  // and prunes. Returns the checkpoint's path. Throws IoError on failure, leaving
  // the earlier checkpoints intact.
  std::string save(const Manifest& manifest, const std::vector<TensorRef>& model,
                   const std::vector<TensorRef>& optimizer);

  // Has the files of a checkpoint written into the temporary directory it is
  // given (a path under dir()) and returns their digests by file name.
  using FileWriter = std::function<std::map<std::string, FileDigest>(const std::string& tmp_dir)>;
  // Saves a sharded checkpoint: `write` has others write (and fsync) the files
  // manifest.sharded names; each must then be in the directory, of the size its
  // digest says (IoError otherwise: a checkpoint.dir that is not one shared
  // directory, say). The manifest is written last, then the commit as save()'s.
  std::string save_sharded(const Manifest& manifest, const FileWriter& write);

  // Every ckpt-* directory, oldest first, each verified (SHA-256 of every file).
  std::vector<CheckpointEntry> list() const;
  // The same directories, oldest first, without reading them (problem left "").
  std::vector<CheckpointEntry> entries() const;

  // The newest good checkpoint, or nullopt. Each newer one skipped is reported
  // with the reason: appended to `skipped` when given, else through log::warn.
  std::optional<std::string> latest_good(std::vector<std::string>* skipped = nullptr) const;

  // Why the checkpoint at `path` is not good, or "" if it is.
  static std::string verify(const std::string& path);

  // Verifies and reads a checkpoint (a sharded one's tensors put together whole).
  // IoError naming the file when it is not good.
  static LoadedCheckpoint load(const std::string& path);
  // The same (verify() still hashes every file, streaming), but reads only the
  // model and optimizer tensors `wanted` accepts; the others are left out (find()
  // gives nullptr). A sharded checkpoint opens only the part files that hold parts
  // of wanted tensors and checks that only those tensors' parts cover them: what
  // a pipeline stage resumes from without the whole model in memory.
  static LoadedCheckpoint load(const std::string& path, const TensorFilter& wanted);

  // "ckpt-00000100" for step 100.
  static std::string dir_name(int64_t step);

 private:
  // The save protocol around `fill`, which writes the files into the temporary
  // directory and lists them in the manifest's `files`.
  std::string commit(const Manifest& manifest, const std::function<void(const std::string& tmp, Manifest&)>& fill);
  void prune(const std::string& just_saved) const;

  std::string dir_;
  int keep_;
};

}  // namespace dtrain::checkpoint
