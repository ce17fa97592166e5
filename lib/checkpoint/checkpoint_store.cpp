// CheckpointStore: the save protocol (temp dir, fsync, rename, fsync, DONE), pruning,
// verification and loading. See checkpoint_store.h for the guarantees.
#include "checkpoint/checkpoint_store.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

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

}  // namespace

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

std::string CheckpointStore::save(const Manifest& manifest_in, const std::vector<TensorRef>& model,
                                  const std::vector<TensorRef>& optimizer) {
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
    for (const auto& [file, tensors, kind] :
         {std::tuple{kModelFile, &model, "model"}, std::tuple{kOptimizerFile, &optimizer, "optimizer"}}) {
      FileDigest d;
      d.sha256 = write_safetensors((tmp / file).string(), *tensors, file_metadata(manifest, kind), &d.bytes);
      manifest.files[file] = d;
    }
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
    for (const char* required : {kModelFile, kOptimizerFile})
      if (!m.files.count(required)) return str(kManifestFile, " does not list ", required);
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
  const std::string problem = verify(path);
  if (!problem.empty()) throw IoError(str("checkpoint ", path, " is not usable: ", problem));
  const fs::path dir(path);
  LoadedCheckpoint c;
  c.path = path;
  c.manifest = manifest_from_json(read_file((dir / kManifestFile).string()), (dir / kManifestFile).string());
  c.model = read_safetensors((dir / kModelFile).string());
  c.optimizer = read_safetensors((dir / kOptimizerFile).string());
  return c;
}

}  // namespace dtrain::checkpoint
