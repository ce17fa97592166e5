// CheckpointStore: the save protocol (temp dir, fsync, rename, fsync, DONE), pruning,
// verification and loading. See checkpoint_store.h for the guarantees.
#include "checkpoint/checkpoint_store.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "checkpoint/durable_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"

namespace dtrain::checkpoint {
namespace fs = std::filesystem;
namespace {

// Parses "ckpt-<digits>" into a step; -1 for anything else.
int64_t step_of(const std::string& name) {
  static const std::regex pattern("ckpt-([0-9]{8,18})");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return -1;
  return std::stoll(m[1].str());
}

bool is_plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

void remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) log::warn("checkpoint: could not remove ", path.string(), ": ", ec.message());
}

std::map<std::string, std::string> file_metadata(const Manifest& m, const char* kind) {
  return {{"format", "dtrain"},
          {"dtrain_kind", kind},
          {"dtrain_step", std::to_string(m.step)},
          {"dtrain_version", m.dtrain_version}};
}

// The first file the sharded layout names that `files` does not list, as
// "<file> (which holds part of <tensor>)", or "".
std::string unlisted_part(const Manifest& m) {
  for (const auto* list : {&m.sharded.model, &m.sharded.optimizer})
    for (const ShardedTensor& t : *list)
      for (const TensorPart& part : t.parts)
        if (!m.files.count(part.file)) return str(part.file, " (which holds part of ", t.name, ")");
  return "";
}

// The part files of a sharded checkpoint at `path` that hold parts of the tensors
// `wanted` accepts, by file name, each read with only those parts: a file that
// holds none of them is not opened.
std::map<std::string, SafetensorsFile> read_parts(const std::string& path, const Manifest& m,
                                                  const TensorFilter& wanted) {
  std::map<std::string, std::set<std::string>> parts_in;  // file -> the part tensors to read from it
  for (const auto* list : {&m.sharded.model, &m.sharded.optimizer})
    for (const ShardedTensor& t : *list)
      if (wanted(t.name))
        for (const TensorPart& part : t.parts) parts_in[part.file].insert(part.tensor);
  std::map<std::string, SafetensorsFile> files;
  for (const auto& [file, file_parts] : parts_in) {
    const std::set<std::string>& parts = file_parts;  // a lambda cannot capture a structured binding in clang 14
    files[file] = read_safetensors((fs::path(path) / file).string(),
                                   [&](const std::string& name) { return parts.count(name) > 0; });
  }
  return files;
}

// The whole tensors of a sharded checkpoint at `path` that `wanted` accepts, each
// put together from its parts, which must cover it exactly (no gap, no overlap).
// `files`: read_parts() of the same `wanted`.
SafetensorsFile assemble(const std::string& path, const Manifest& m, const std::vector<ShardedTensor>& tensors,
                         const char* kind, const TensorFilter& wanted,
                         const std::map<std::string, SafetensorsFile>& files) {
  SafetensorsFile out;
  out.metadata = file_metadata(m, kind);
  for (const ShardedTensor& t : tensors) {
    if (!wanted(t.name)) continue;
    NamedTensor whole{t.name, t.shape, Tensor(t.shape)};
    const int64_t n = whole.tensor.numel();
    std::vector<std::pair<int64_t, int64_t>> covered;  // (offset, elements) of each part
    for (const TensorPart& part : t.parts) {
      const Tensor* piece = files.at(part.file).find(part.tensor);
      if (!piece)
        throw IoError(str("checkpoint ", path, ": ", part.file, " has no tensor '", part.tensor, "' (part of ",
                          t.name, ")"));
      if (part.offset + piece->numel() > n)
        throw IoError(str("checkpoint ", path, ": the part '", part.tensor, "' of ", t.name, " (", piece->numel(),
                          " elements at ", part.offset, ") runs past its ", n, " elements"));
      std::memcpy(whole.tensor.data() + part.offset, piece->data(), piece->bytes());
      covered.emplace_back(part.offset, piece->numel());
    }
    std::sort(covered.begin(), covered.end());
    int64_t next = 0;
    for (const auto& [offset, count] : covered) {
      if (offset != next) break;
      next += count;
    }
    if (next != n)
      throw IoError(str("checkpoint ", path, ": the parts of ", t.name, " do not cover its ", n,
                        " elements exactly (a gap or an overlap at element ", next, ")"));
    out.tensors.push_back(std::move(whole));
  }
  return out;
}

}  // namespace

void require_checkpoint_directory(const std::string& dir, const std::string& prefix, const std::string& if_missing) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (fs::is_directory(status)) return;
  if (!fs::exists(status))
    throw IoError(str(prefix, "no such checkpoint directory: ", dir, if_missing));
  throw IoError(str(prefix, dir, " is a file, not a checkpoint directory: name the directory the checkpoints were "
                    "saved in (checkpoint.dir, or output.dir/checkpoints), or one ckpt-* directory inside it"));
}

std::vector<TensorRef> tensor_refs(const std::vector<nn::Param*>& params) {
  std::vector<TensorRef> refs;
  refs.reserve(params.size());
  for (const nn::Param* p : params) {
    if (!p->value.device().is_cpu())
      throw InternalError(str("checkpoint: param ", p->name, " is not on the host; copy it first"));
    refs.push_back({p->name, p->value.shape(), p->value.data()});
  }
  return refs;
}

CheckpointStore::CheckpointStore(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  if (keep_ < 1) throw ConfigError(str("checkpoint.keep must be at least 1, got ", keep_));
}

std::string CheckpointStore::dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%08lld", static_cast<long long>(step));
  return buf;
}

std::string CheckpointStore::save(const Manifest& manifest, const std::vector<TensorRef>& model,
                                  const std::vector<TensorRef>& optimizer) {
  return commit(manifest, [&](const std::string& tmp, Manifest& m) {
    m.sharded = {};
    for (const auto& [file, tensors, kind] :
         {std::tuple{kModelFile, &model, "model"}, std::tuple{kOptimizerFile, &optimizer, "optimizer"}}) {
      FileDigest d;
      d.sha256 = write_safetensors((fs::path(tmp) / file).string(), *tensors, file_metadata(m, kind), &d.bytes);
      m.files[file] = d;
    }
  });
}

std::string CheckpointStore::save_sharded(const Manifest& manifest, const FileWriter& write) {
  if (manifest.sharded.model.empty()) throw InternalError("checkpoint: a sharded save needs the sharded layout");
  return commit(manifest, [&](const std::string& tmp, Manifest& m) {
    m.files = write(tmp);
    for (const auto& [name, digest] : m.files) {
      if (!is_plain_name(name) || name == kManifestFile || name == kDoneFile)
        throw InternalError(str("checkpoint: a sharded save wrote a file called '", name, "'"));
      std::error_code ec;
      const uint64_t bytes = fs::file_size(fs::path(tmp) / name, ec);
      if (ec || bytes != digest.bytes)
        throw IoError(str("checkpoint: ", name, " is not in ", tmp, ec ? "" : str(" with its ", digest.bytes, " bytes"),
                          " where its writer put it: checkpoint.dir must be the same directory for every task "
                          "(a shared filesystem when the tasks are on several hosts)"));
    }
    if (const std::string missing = unlisted_part(m); !missing.empty())
      throw InternalError(str("checkpoint: a sharded save did not write what its layout names: ", missing));
  });
}

std::string CheckpointStore::commit(const Manifest& manifest_in,
                                    const std::function<void(const std::string& tmp, Manifest&)>& fill) {
  if (manifest_in.step < 0) throw InternalError(str("checkpoint: negative step ", manifest_in.step));
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw IoError(str("cannot create checkpoint directory ", dir_, ": ", ec.message()));

  Manifest manifest = manifest_in;
  if (manifest.dtrain_version.empty()) manifest.dtrain_version = DTRAIN_VERSION;
  manifest.files.clear();

  const std::string name = dir_name(manifest.step);
  const fs::path tmp = fs::path(dir_) / str(".tmp-", name, "-", random_hex(4));
  const fs::path final_path = fs::path(dir_) / name;
  if (!fs::create_directory(tmp, ec) || ec)
    throw IoError(str("cannot create ", tmp.string(), ": ", ec ? ec.message() : "it exists"));
  try {
    fill(tmp.string(), manifest);
    const std::string manifest_sha = write_file_durably((tmp / kManifestFile).string(), manifest_to_json(manifest));
    fsync_dir(tmp.string());

    // Re-saving a step (e.g. after a crash between rename and DONE): move the old
    // one aside first, since rename() cannot replace a non-empty directory.
    if (fs::exists(final_path)) {
      const fs::path old = fs::path(dir_) / str(".old-", name, "-", random_hex(4));
      fs::rename(final_path, old, ec);
      if (ec) throw IoError(str("cannot move aside ", final_path.string(), ": ", ec.message()));
      remove_tree(old);
    }
    fs::rename(tmp, final_path, ec);
    if (ec) throw IoError(str("cannot rename ", tmp.string(), " to ", final_path.string(), ": ", ec.message()));
    fsync_dir(dir_);
    // Only now is the checkpoint complete: DONE is the commit record.
    write_file_durably((final_path / kDoneFile).string(), manifest_sha + "\n");
    fsync_dir(final_path.string());
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
  prune(name);
  return final_path.string();
}

void CheckpointStore::prune(const std::string& just_saved) const {
  std::vector<std::pair<int64_t, fs::path>> complete, incomplete;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".tmp-ckpt-", 0) == 0 || name.rfind(".old-ckpt-", 0) == 0) {
      remove_tree(e.path());  // left by a save that crashed (only one process saves into a dir)
      continue;
    }
    const int64_t step = step_of(name);
    if (step < 0 || !e.is_directory()) continue;
    (fs::exists(e.path() / kDoneFile) ? complete : incomplete).emplace_back(step, e.path());
  }
  if (ec) {
    log::warn("checkpoint: cannot list ", dir_, " to prune: ", ec.message());
    return;
  }
  std::sort(complete.begin(), complete.end());
  const int64_t newest = complete.empty() ? -1 : complete.back().first;
  for (size_t i = 0; i + keep_ < complete.size(); ++i) {
    if (complete[i].second.filename() == just_saved) continue;
    remove_tree(complete[i].second);
  }
  for (const auto& [step, path] : incomplete)
    if (step < newest) remove_tree(path);
  // The save itself is already durable; a failure here only delays the removals.
  try {
    fsync_dir(dir_);
  } catch (const Error& e) {
    log::warn("checkpoint: ", e.what());
  }
}

std::string CheckpointStore::verify(const std::string& path) {
  const fs::path dir(path);
  if (!fs::is_directory(dir)) return "not a directory";
  if (!fs::exists(dir / kDoneFile)) return "no DONE marker (the save did not finish)";
  try {
    const std::string done = trim(read_file((dir / kDoneFile).string()));
    const std::string text = read_file((dir / kManifestFile).string());
    if (sha256_hex(text) != done) return str(kManifestFile, " does not match the SHA-256 in DONE (corrupt)");
    const Manifest m = manifest_from_json(text, (dir / kManifestFile).string());
    if (m.sharded.empty()) {
      for (const char* required : {kModelFile, kOptimizerFile})
        if (!m.files.count(required)) return str(kManifestFile, " does not list ", required);
    }
    if (const std::string missing = unlisted_part(m); !missing.empty())
      return str(kManifestFile, " does not list ", missing);
    for (const auto& [name, digest] : m.files) {
      if (!is_plain_name(name)) return str(kManifestFile, " lists a bad file name '", name, "'");
      const fs::path file = dir / name;
      if (!fs::exists(file)) return str(name, " is missing");
      uint64_t bytes = 0;
      const std::string sha = sha256_file(file.string(), &bytes);
      if (bytes != digest.bytes) return str(name, " is ", bytes, " bytes, the manifest says ", digest.bytes, " (truncated?)");
      if (sha != digest.sha256) return str(name, " does not match its SHA-256 in the manifest (corrupt)");
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<CheckpointEntry> CheckpointStore::entries() const {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_directory()) out.push_back({e.path().string(), step, ""});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::vector<CheckpointEntry> CheckpointStore::list() const {
  std::vector<CheckpointEntry> out = entries();
  for (CheckpointEntry& c : out) c.problem = verify(c.path);
  return out;
}

std::optional<std::string> CheckpointStore::latest_good(std::vector<std::string>* skipped) const {
  const std::vector<CheckpointEntry> found = entries();
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const std::string problem = verify(it->path);
    if (problem.empty()) return it->path;
    const std::string message = str("skipping checkpoint ", it->path, ": ", problem);
    if (skipped) skipped->push_back(message);
    else log::warn(message);
  }
  return std::nullopt;
}

LoadedCheckpoint CheckpointStore::load(const std::string& path) {
  return load(path, [](const std::string&) { return true; });
}

LoadedCheckpoint CheckpointStore::load(const std::string& path, const TensorFilter& wanted) {
  const std::string problem = verify(path);
  if (!problem.empty()) throw IoError(str("checkpoint ", path, " is not usable: ", problem));
  const fs::path dir(path);
  LoadedCheckpoint c;
  c.path = path;
  c.manifest = manifest_from_json(read_file((dir / kManifestFile).string()), (dir / kManifestFile).string());
  if (c.manifest.sharded.empty()) {
    c.model = read_safetensors((dir / kModelFile).string(), wanted);
    c.optimizer = read_safetensors((dir / kOptimizerFile).string(), wanted);
    return c;
  }
  const std::map<std::string, SafetensorsFile> files = read_parts(path, c.manifest, wanted);
  c.model = assemble(path, c.manifest, c.manifest.sharded.model, "model", wanted, files);
  c.optimizer = assemble(path, c.manifest, c.manifest.sharded.optimizer, "optimizer", wanted, files);
  return c;
}

}  // namespace dtrain::checkpoint
