// Implementation of checkpointing.h.
#include "trainer/checkpointing.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/durable_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "core/trace.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {
namespace {

// The chief's parameter hash, sent to every worker as raw bytes in floats (a
// broadcast copies bytes; nothing is computed on them), compared with their own.
void check_same_parameters(comm::Communicator& workers, const std::string& hash, int64_t step) {
  float bits[8];
  static_assert(sizeof bits == 32);
  std::string raw(32, '\0');
  for (int i = 0; i < 32; ++i) raw[i] = static_cast<char>(std::stoi(hash.substr(2 * i, 2), nullptr, 16));
  std::memcpy(bits, raw.data(), 32);
  workers.broadcast(bits, 8, 0);
  if (std::memcmp(bits, raw.data(), 32) != 0)
    throw RuntimeError(str("at the checkpoint after step ", step, " this worker's parameters (", hash.substr(0, 16),
                           "...) differ from the chief's: the replicas diverged"));
}

// The dynamic loss scale saved with a checkpoint ("loss_scale" in the manifest's
// rng object), into `scale`. A checkpoint without one (a float32 run resumed with
// mixed_float16) leaves the initial scale; a run without loss scaling ignores it.
void restore_loss_scale(const nlohmann::json& rng, optim::DynamicLossScale* scale) {
  if (!scale || !rng.contains("loss_scale")) return;
  const nlohmann::json& saved = rng["loss_scale"];
  optim::LossScaleState state;
  try {
    state.scale = saved.at("scale").get<double>();
    state.good_steps = saved.at("good_steps").get<int64_t>();
    state.skipped_steps = saved.at("skipped_steps").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(str("the checkpoint's loss_scale record is malformed: ", e.what()));
  }
  scale->restore(state);
  log::info("checkpoint: loss scale ", state.scale, " restored (", state.good_steps, " finite step(s) toward growth)");
}

}  // namespace

std::string checkpoint_dir(const job::JobConfig& job) {
  if (!job.checkpoint.dir.empty()) return job.checkpoint.dir;
  if (!job.output.dir.empty()) return (std::filesystem::path(job.output.dir) / "checkpoints").string();
  return "";
}

Checkpointer::Checkpointer(const job::JobConfig& job, strategy::Strategy& strategy, comm::Communicator* workers,
                           bool final_checkpoint)
    : job_(job), strategy_(strategy), workers_(workers), final_checkpoint_(final_checkpoint) {
  writer_ = !workers_ || workers_->rank() == 0;
  dir_ = checkpoint_dir(job);
  const bool asked = job.checkpoint.every_steps > 0 || job.checkpoint.every_epochs > 0 ||
                     job.checkpoint.resume;
  if (asked && dir_.empty())
    throw ConfigError("checkpoint: saving or resuming needs checkpoint.dir or output.dir");
  fallback_dir_ = dir_;
  if (!asked) dir_.clear();
}

Checkpointer::~Checkpointer() = default;

void Checkpointer::write_sharded(checkpoint::ShardedLayout layout, ShardWriter write) {
  sharded_ = std::move(layout);
  shard_writer_ = std::move(write);
}

ResumePoint Checkpointer::resume(int64_t global_batch, int64_t steps_per_epoch) {
  ResumePoint point;
  if (!enabled() || !job_.checkpoint.resume) return point;
  checkpoint::CheckpointStore store(dir_, static_cast<int>(job_.checkpoint.keep));
  const auto path = store.latest_good();
  if (!path) {
    log::info("checkpoint: nothing to resume from in ", dir_, "; starting from the beginning");
    return point;
  }
  // Only the tensors this task's strategy loads (a pipeline stage: its layers').
  const std::vector<std::string> names = strategy_.state_names_to_load();
  const std::set<std::string> wanted(names.begin(), names.end());
  const checkpoint::LoadedCheckpoint ckpt = checkpoint::CheckpointStore::load(
      *path, [&](const std::string& n) { return wanted.count(n) > 0; });
  // A wanted name the checkpoint lacks finds nullptr (the strategy's ConfigError
  // names it); a name never asked for was not read, which is a strategy's bug.
  auto find_in = [&](const checkpoint::SafetensorsFile& file, const std::string& n) {
    if (!wanted.count(n))
      throw InternalError(str("checkpoint: strategy ", strategy_.name(), " looked up '", n,
                              "', which its state_names_to_load() does not list"));
    return file.find(n);
  };
  strategy_.load_state([&](const std::string& n) { return find_in(ckpt.model, n); },
                       [&](const std::string& n) { return find_in(ckpt.optimizer, n); });
  const nlohmann::json rng = nlohmann::json::parse(ckpt.manifest.rng_json);
  const int64_t saved_batch = rng.value("global_batch", global_batch);
  const int64_t saved_step_in_epoch = rng.value("step_in_epoch", int64_t{0});
  if (rng.contains("callbacks")) point.callbacks_json = rng["callbacks"].dump();
  restore_loss_scale(rng, strategy_.loss_scale());
  point.resumed = true;
  point.global_step = ckpt.manifest.step;
  point.epoch = ckpt.manifest.epoch;
  // The position in the epoch is kept in samples, so another number of replicas
  // continues where the data stream stood.
  point.step_in_epoch = saved_step_in_epoch * saved_batch / global_batch;
  if (point.step_in_epoch * global_batch != saved_step_in_epoch * saved_batch)
    log::warn("checkpoint: the global batch changed from ", saved_batch, " to ", global_batch, "; ",
              saved_step_in_epoch * saved_batch - point.step_in_epoch * global_batch,
              " samples of the current epoch are skipped");
  if (point.step_in_epoch >= steps_per_epoch) {
    point.step_in_epoch = 0;
    point.epoch += 1;
  }
  if (ckpt.manifest.config_sha256 != sha256_hex(job_.agreement_json))
    log::info("checkpoint: the job config differs from the one that wrote ", *path,
              " (e.g. more epochs, or --resume itself); continuing with this config");
  log::info("checkpoint: resumed from ", *path, " at step ", point.global_step, " (epoch ", point.epoch + 1,
            ", step ", point.step_in_epoch, " of it), written by ", ckpt.manifest.world_size, " replica(s)");
  if (point.epoch >= job_.train.epochs)
    log::info("checkpoint: ", *path, " is the end of training (", point.epoch, " epoch(s) done, train.epochs is ",
              job_.train.epochs, "): nothing is left to train, and the report is of its parameters; raise "
              "train.epochs to train on");
  last_saved_step_ = point.global_step;
  return point;
}

void Checkpointer::after_step(int64_t global_step, int64_t epoch, int64_t step_in_epoch, int64_t global_batch) {
  if (!enabled() || job_.checkpoint.every_steps <= 0) return;
  if (global_step % job_.checkpoint.every_steps == 0) save(global_step, epoch, step_in_epoch, global_batch);
}

void Checkpointer::after_steps(int64_t from, int64_t to, int64_t epoch, int64_t step_in_epoch,
                               int64_t global_batch) {
  if (!enabled() || job_.checkpoint.every_steps <= 0 || to <= from) return;
  if (to / job_.checkpoint.every_steps > from / job_.checkpoint.every_steps)
    save(to, epoch, step_in_epoch, global_batch);
}

void Checkpointer::after_epoch(int64_t global_step, int64_t epochs_done, int64_t global_batch, bool last,
                               bool improved) {
  if (last && final_checkpoint_ && !fallback_dir_.empty()) {
    dir_ = fallback_dir_;
    return save(global_step, epochs_done, 0, global_batch);
  }
  if (!enabled()) return;
  const config::CheckpointSpec& ck = job_.checkpoint;
  const bool due = ck.every_epochs > 0 && epochs_done % ck.every_epochs == 0 && (!ck.save_best_only || improved);
  const bool periodic = ck.every_steps > 0 || ck.every_epochs > 0;
  if (due || (last && periodic && !ck.save_best_only)) save(global_step, epochs_done, 0, global_batch);
}

std::string Checkpointer::save_now(int64_t global_step, int64_t epoch, int64_t step_in_epoch,
                                   int64_t global_batch) {
  if (fallback_dir_.empty()) return "";
  dir_ = fallback_dir_;
  save(global_step, epoch, step_in_epoch, global_batch);
  return (std::filesystem::path(dir_) / checkpoint::CheckpointStore::dir_name(global_step)).string();
}

namespace {

// Params as host tensors for writing: the same tensors on the CPU, copies from a GPU.
class HostParams {
 public:
  explicit HostParams(const std::vector<nn::Param*>& params) {
    for (const nn::Param* p : params) copies_.push_back({p->name, p->value.to_host(), Tensor()});
  }
  std::vector<nn::Param*> pointers() {
    std::vector<nn::Param*> out;
    for (nn::Param& p : copies_) out.push_back(&p);
    return out;
  }

 private:
  std::vector<nn::Param> copies_;
};

// The file a training task writes its pieces of a sharded checkpoint into.
std::string part_file(int rank, int tasks) {
  char name[64];
  std::snprintf(name, sizeof name, "part-%05d-of-%05d.safetensors", rank, tasks);
  return name;
}

// The name of a piece inside its part file: "model/dense/kernel@0".
std::string piece_tensor(const strategy::StatePiece& piece) {
  return str(piece.optimizer ? "optimizer/" : "model/", piece.name, "@", piece.offset);
}

// Writes this task's pieces into `path` (fsynced). Each tensor's metadata entry
// says which whole tensor it is part of: {"name", "shape", "offset", "kind"}.
void write_pieces(const std::string& path, const std::vector<strategy::StatePiece>& pieces) {
  std::vector<Tensor> host;
  host.reserve(pieces.size());
  std::vector<checkpoint::TensorRef> refs;
  std::map<std::string, std::string> metadata;
  for (const strategy::StatePiece& piece : pieces) {
    host.push_back(piece.value->to_host());
    const std::string tensor = piece_tensor(piece);
    refs.push_back({tensor, host.back().shape(), host.back().data()});
    metadata[tensor] = nlohmann::json{{"name", piece.name},
                                      {"shape", piece.whole_shape},
                                      {"offset", piece.offset},
                                      {"kind", piece.optimizer ? "optimizer" : "model"}}
                           .dump();
  }
  checkpoint::write_safetensors(path, refs, metadata);
}

// The layout of a sharded checkpoint from its part files' headers: whole tensors
// in the order the parts name them (task by task), each with its parts.
checkpoint::ShardedLayout layout_of_parts(const std::string& dir, int tasks) {
  checkpoint::ShardedLayout layout;
  std::map<std::string, size_t> index[2];  // name -> position in layout.model / layout.optimizer
  for (int rank = 0; rank < tasks; ++rank) {
    const std::string file = part_file(rank, tasks);
    const checkpoint::SafetensorsFile header =
        checkpoint::read_safetensors_header((std::filesystem::path(dir) / file).string());
    for (const checkpoint::NamedTensor& t : header.tensors) {
      const auto meta = header.metadata.find(t.name);
      if (meta == header.metadata.end())
        throw IoError(str("checkpoint: ", file, " in ", dir, " has no metadata for its tensor '", t.name, "'"));
      const nlohmann::json m = nlohmann::json::parse(meta->second);
      const bool optimizer = m.at("kind").get<std::string>() == "optimizer";
      std::vector<checkpoint::ShardedTensor>& list = optimizer ? layout.optimizer : layout.model;
      const std::string name = m.at("name").get<std::string>();
      auto [at, added] = index[optimizer].emplace(name, list.size());
      if (added) list.push_back({name, m.at("shape").get<std::vector<int64_t>>(), {}});
      list[at->second].parts.push_back({file, t.name, m.at("offset").get<int64_t>()});
    }
  }
  return layout;
}

}  // namespace

void Checkpointer::save_pieces(checkpoint::Manifest m, nlohmann::json rng, int64_t global_step) {
  // Every training task writes its pieces into a directory beside the
  // checkpoints; once all have (a barrier), the chief moves them into the
  // checkpoint's temporary directory and commits it with the manifest last.
  strategy_.sync_state();
  const std::vector<strategy::StatePiece> pieces = strategy_.state_pieces();
  const std::string hash = strategy_.params_sha256();
  const int rank = workers_ ? workers_->rank() : 0;
  const int tasks = workers_ ? workers_->size() : 1;
  const std::filesystem::path parts = std::filesystem::path(dir_) / str(".parts-", checkpoint::CheckpointStore::dir_name(global_step));
  std::error_code ec;
  std::filesystem::create_directories(parts, ec);
  if (ec) throw IoError(str("checkpoint: cannot create ", parts.string(), ": ", ec.message()));
  write_pieces((parts / part_file(rank, tasks)).string(), pieces);
  if (workers_) workers_->barrier();
  if (writer_) {
    rng["params_sha256"] = hash;
    m.rng_json = rng.dump();
    m.sharded = layout_of_parts(parts.string(), tasks);
    checkpoint::CheckpointStore store(dir_, static_cast<int>(job_.checkpoint.keep));
    const std::string path = store.save_sharded(m, [&](const std::string& tmp_dir) {
      std::map<std::string, checkpoint::FileDigest> files;
      for (int r = 0; r < tasks; ++r) {
        const std::string file = part_file(r, tasks);
        const std::filesystem::path to = std::filesystem::path(tmp_dir) / file;
        std::filesystem::rename(parts / file, to, ec);
        if (ec)
          throw IoError(str("checkpoint: cannot move ", (parts / file).string(), " into ", tmp_dir, ": ", ec.message(),
                            " (checkpoint.dir must be one directory every task writes to)"));
        checkpoint::FileDigest& digest = files[file];
        digest.sha256 = checkpoint::sha256_file(to.string(), &digest.bytes);
      }
      return files;
    });
    std::filesystem::remove_all(parts, ec);
    log::info("checkpoint: saved ", path, " (step ", global_step, "; each of the ", tasks,
              " training tasks wrote its own part)");
  }
  // Nobody goes on (and perhaps fails) before the checkpoint is committed.
  if (workers_) workers_->barrier();
}

void Checkpointer::save(int64_t global_step, int64_t epoch, int64_t step_in_epoch, int64_t global_batch) {
  if (global_step == last_saved_step_) return;
  const trace::Span span("checkpoint save", "checkpoint");
  last_saved_step_ = global_step;
  checkpoint::Manifest m;
  m.step = global_step;
  m.epoch = epoch;
  m.samples_seen = global_step * global_batch;
  m.world_size = strategy_.num_replicas_in_sync();
  m.config_sha256 = sha256_hex(job_.agreement_json);
  nlohmann::json rng = {{"seed", job_.train.seed},
                        {"epoch", epoch},
                        {"step_in_epoch", step_in_epoch},
                        {"global_batch", global_batch},
                        {"note", "shuffles and dropout masks are functions of (seed, epoch, step)"}};
  if (!callbacks_json_.empty() && callbacks_json_ != "{}") rng["callbacks"] = nlohmann::json::parse(callbacks_json_);
  if (const optim::DynamicLossScale* scale = strategy_.loss_scale()) {
    const optim::LossScaleState& state = scale->state();
    rng["loss_scale"] = {{"scale", state.scale},
                         {"good_steps", state.good_steps},
                         {"skipped_steps", state.skipped_steps}};
  }
  checkpoint::CheckpointStore store(dir_, static_cast<int>(job_.checkpoint.keep));
  if (!sharded_.empty()) {  // the ps tasks write the tensors; this task has no copy of them to hash
    m.rng_json = rng.dump();
    m.sharded = sharded_;
    const std::string path = store.save_sharded(
        m, [&](const std::string& tmp_dir) { return shard_writer_(tmp_dir, global_step); });
    log::info("checkpoint: saved ", path, " (step ", global_step, "; each ps task wrote its own shards)");
    return;
  }
  if (strategy_.sharded_state()) return save_pieces(std::move(m), std::move(rng), global_step);
  strategy_.sync_state();  // replicas' batch-norm statistics agree before they are written
  nn::Sequential& model = strategy_.model();
  const std::string hash = model.params_sha256();
  if (writer_) {
    rng["params_sha256"] = hash;
    m.rng_json = rng.dump();
    HostParams model_host(model.params()), optimizer_host(strategy_.optimizer().state());
    const std::string path = store.save(m, checkpoint::tensor_refs(model_host.pointers()),
                                        checkpoint::tensor_refs(optimizer_host.pointers()));
    log::info("checkpoint: saved ", path, " (step ", global_step, ")");
  }
  if (workers_) check_same_parameters(*workers_, hash, global_step);
}

}  // namespace dtrain::trainer
