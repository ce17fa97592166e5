// `dtrain ckpt inspect DIR [--json]` and `dtrain ckpt export DIR --to FILE`: read checkpoints
// written by lib/checkpoint. DIR is one checkpoint (it holds manifest.json), a
// checkpoint directory holding several, whose newest good one is used, or a job's
// output.dir whose checkpoints/ subdirectory holds them (the default checkpoint.dir).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/manifest.h"
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "core/sha256.h"
#include "core/strings.h"

namespace dtrain::app {
namespace {
namespace fs = std::filesystem;
using checkpoint::CheckpointStore;

bool is_single_checkpoint(const std::string& dir) {
  return fs::exists(fs::path(dir) / checkpoint::kManifestFile) || fs::exists(fs::path(dir) / checkpoint::kDoneFile);
}

// A file a run writes into its output.dir that DIR holds ("" when none).
std::string output_file_in(const std::string& dir) {
  for (const char* name : {"metrics.jsonl", "summary.json"})
    if (fs::exists(fs::path(dir) / name)) return name;
  return "";
}
bool is_output_dir(const std::string& dir) { return !output_file_in(dir).empty(); }

// The checkpoint directory DIR names: DIR itself, or DIR/checkpoints when DIR
// holds no checkpoint but that does (DIR is then a job's output.dir), said on stderr.
std::string store_dir(const std::string& dir) {
  const fs::path nested = fs::path(dir) / "checkpoints";
  if (!CheckpointStore(dir).entries().empty() || !fs::is_directory(nested) || CheckpointStore(nested).entries().empty())
    return dir;
  std::fprintf(stderr, "dtrain: %s holds no checkpoint; reading %s (a job's output.dir keeps them there)\n",
               dir.c_str(), nested.c_str());
  return nested.string();
}

// The checkpoint DIR names. With `list`, prints every checkpoint of a store and its
// status; with `entries` too, stores them there instead of printing them.
std::string resolve_checkpoint(const std::string& given, bool list,
                               std::vector<checkpoint::CheckpointEntry>* entries_out = nullptr) {
  checkpoint::require_checkpoint_directory(given, "", "");
  if (is_single_checkpoint(given)) return given;
  const std::string dir = store_dir(given);
  const CheckpointStore store(dir);
  if (list && entries_out) {
    *entries_out = store.list();
    list = false;
  }
  if (list) {
    const auto entries = store.list();
    std::printf("checkpoints in %s: %zu\n", dir.c_str(), entries.size());
    for (const auto& e : entries)
      std::printf("  %s  step %-8lld %s\n", fs::path(e.path).filename().c_str(), static_cast<long long>(e.step),
                  e.good() ? "good" : ("BAD: " + e.problem).c_str());
  }
  std::vector<std::string> skipped;
  const auto latest = store.latest_good(&skipped);
  if (!list)
    for (const std::string& s : skipped) std::fprintf(stderr, "dtrain: warning: %s\n", s.c_str());
  if (!latest && store.entries().empty() && is_output_dir(given))
    throw IoError(str(given, " is a job's output directory (it holds ", output_file_in(given),
                      ") with no checkpoint in it or in its checkpoints/: that job saved none. A job saves them with "
                      "checkpoint.every_epochs or checkpoint.every_steps (e.g. --set checkpoint.every_epochs=1)"));
  if (!latest)
    throw IoError(str("no good checkpoint in ", dir,
                      store.entries().empty() ? "; it holds no ckpt-NNNNNNNN directory: give the job's checkpoint.dir "
                                                "(by default <output.dir>/checkpoints), its output.dir, or one checkpoint"
                                              : ""));
  if (list) std::printf("latest good: %s\n\n", fs::path(*latest).filename().c_str());
  return *latest;
}

struct TensorStats {
  int64_t count = 0;
  double sum = 0;
  float min = std::numeric_limits<float>::infinity(), max = -std::numeric_limits<float>::infinity();
};

TensorStats tensor_stats(const Tensor& t) {
  TensorStats s;
  const float* p = t.data();
  s.count = t.numel();
  for (int64_t i = 0; i < s.count; ++i) {
    s.sum += p[i];
    s.min = std::min(s.min, p[i]);
    s.max = std::max(s.max, p[i]);
  }
  return s;
}

// [{name, shape, count, sum, min, max}] in file order; min and max are null when empty.
nlohmann::ordered_json tensors_json(const checkpoint::SafetensorsFile& file) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& t : file.tensors) {
    const TensorStats s = tensor_stats(t.tensor);
    const nlohmann::ordered_json none;
    out.push_back({{"name", t.name},
                   {"shape", t.shape},
                   {"count", s.count},
                   {"sum", s.sum},
                   {"min", s.count ? nlohmann::ordered_json(static_cast<double>(s.min)) : none},
                   {"max", s.count ? nlohmann::ordered_json(static_cast<double>(s.max)) : none}});
  }
  return out;
}

void print_tensor_table(const std::string& title, const checkpoint::SafetensorsFile& file) {
  size_t width = 4;
  int64_t total = 0;
  for (const auto& t : file.tensors) {
    width = std::max(width, t.name.size());
    total += t.tensor.numel();
  }
  std::printf("%s: %zu tensors, %lld values\n", title.c_str(), file.tensors.size(), static_cast<long long>(total));
  if (file.tensors.empty()) return;
  const int w = static_cast<int>(width);
  std::printf("  %-*s  %-16s %10s %13s %13s %13s\n", w, "name", "shape", "count", "mean", "min", "max");
  for (const auto& t : file.tensors) {
    const TensorStats stats = tensor_stats(t.tensor);
    const int64_t n = stats.count;
    const double sum = stats.sum;
    const float lo = stats.min, hi = stats.max;
    if (n == 0) {
      std::printf("  %-*s  %-16s %10lld %13s %13s %13s\n", w, t.name.c_str(), shape_str(t.shape).c_str(), 0LL, "-", "-", "-");
    } else {
      std::printf("  %-*s  %-16s %10lld %13.6g %13.6g %13.6g\n", w, t.name.c_str(), shape_str(t.shape).c_str(),
                  static_cast<long long>(n), sum / static_cast<double>(n), lo, hi);
    }
  }
}

}  // namespace

int ckpt_inspect_command(const CkptInspectOptions& options) {
  std::vector<checkpoint::CheckpointEntry> entries;
  const std::string path = resolve_checkpoint(options.dir, /*list=*/true, options.json ? &entries : nullptr);
  const checkpoint::LoadedCheckpoint c = CheckpointStore::load(path);
  const checkpoint::Manifest& m = c.manifest;
  if (options.json) {
    using ordered_json = nlohmann::ordered_json;
    ordered_json list = ordered_json::array();
    for (const auto& e : entries)
      list.push_back({{"path", e.path}, {"step", e.step}, {"good", e.good()}, {"problem", e.problem}});
    ordered_json j = {{"path", path}, {"checkpoints", list}};
    j.update(ordered_json::parse(checkpoint::manifest_summary_json(m)));  // step ... files, in its order
    j["model"] = tensors_json(c.model);
    j["optimizer"] = tensors_json(c.optimizer);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("checkpoint %s\n", path.c_str());
  std::printf("  step            %lld\n", static_cast<long long>(m.step));
  std::printf("  epoch           %lld\n", static_cast<long long>(m.epoch));
  std::printf("  samples_seen    %lld\n", static_cast<long long>(m.samples_seen));
  std::printf("  world_size      %d\n", m.world_size);
  std::printf("  config_sha256   %s\n", m.config_sha256.c_str());
  std::printf("  dtrain_version  %s\n", m.dtrain_version.c_str());
  std::printf("  rng             %s\n", m.rng_json.c_str());
  std::printf("  files:\n");
  for (const auto& [name, d] : m.files)
    std::printf("    %-22s %10llu bytes  sha256 %s\n", name.c_str(), static_cast<unsigned long long>(d.bytes),
                d.sha256.c_str());
  std::printf("\n");
  // A sharded checkpoint's tensors are shown whole, as put together from the ps tasks' files.
  const bool sharded = !m.sharded.empty();
  const std::string from = str(" (whole, from the ", m.files.size(), " shard files)");
  print_tensor_table(sharded ? "model" + from : checkpoint::kModelFile, c.model);
  std::printf("\n");
  print_tensor_table(sharded ? "optimizer" + from : checkpoint::kOptimizerFile, c.optimizer);
  return 0;
}

int ckpt_export_command(const CkptExportOptions& options) {
  if (options.to.empty()) throw ConfigError("ckpt export needs --to FILE");
  const std::string path = resolve_checkpoint(options.dir, /*list=*/false);
  const checkpoint::LoadedCheckpoint c = CheckpointStore::load(path);
  std::vector<checkpoint::TensorRef> refs;
  int64_t values = 0;
  for (const auto& t : c.model.tensors) {
    refs.push_back({t.name, t.shape, t.tensor.data()});
    values += t.tensor.numel();
  }
  const std::map<std::string, std::string> metadata = {{"format", "dtrain"},
                                                       {"dtrain_step", std::to_string(c.manifest.step)},
                                                       {"dtrain_version", c.manifest.dtrain_version},
                                                       {"dtrain_config_sha256", c.manifest.config_sha256}};
  // Written next to the target and renamed, so an existing FILE is never left half-written.
  write_output_file(options.to, "ckpt export --to",
                    [&](const std::string& to) { checkpoint::write_safetensors(to, refs, metadata); });
  std::printf("wrote %s: %zu tensors, %lld values, from %s (step %lld)\n", options.to.c_str(), refs.size(),
              static_cast<long long>(values), path.c_str(), static_cast<long long>(c.manifest.step));
  return 0;
}

}  // namespace dtrain::app
