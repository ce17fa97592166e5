// Implementation of records.h on nlohmann/json.
#include "trainer/reporting/records.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_store.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"

namespace dtrain::trainer {
namespace {

void make_dirs(const std::filesystem::path& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(str(what, ": cannot create directory '", dir.string(), "': ", ec.message()));
}

// JSON numbers must be finite; a NaN loss is written as null.
nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }

}  // namespace

MetricsLog::MetricsLog(const std::string& dir, bool append, const std::string& tensorboard_dir, int64_t label_width)
    : label_width_(label_width) {
  if (!tensorboard_dir.empty()) {
    make_dirs(tensorboard_dir, "output.tensorboard");  // (a file in the way: said now, not at the first epoch's end)
    tensorboard_ = std::make_unique<TensorBoardLog>(tensorboard_dir);
  }
  if (dir.empty()) return;
  make_dirs(dir, "output.dir");
  path_ = (std::filesystem::path(dir) / "metrics.jsonl").string();
  file_ = std::fopen(path_.c_str(), append ? "a" : "w");
  if (!file_) throw IoError(str("output.dir: cannot write '", path_, "': ", std::strerror(errno)));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write_line(const std::string& line) {
  if (!file_) return;
  if (std::fputs(line.c_str(), file_) < 0 || std::fputc('\n', file_) < 0 || std::fflush(file_) != 0)
    throw IoError(str("cannot write '", path_, "': ", std::strerror(errno)));
}

void MetricsLog::step(int64_t epoch, int64_t step, double loss, double accuracy,
                      double learning_rate, double samples_per_sec) {
  nlohmann::json j{{"kind", "step"},       {"epoch", epoch},
                   {"step", step},         {"loss", number(loss)},
                   {"accuracy", accuracy}, {"learning_rate", learning_rate},
                   {"samples_per_sec", samples_per_sec}};
  const bool sequence = label_width_ > 1;
  if (sequence) {
    j["perplexity"] = number(std::exp(loss));
    j["tokens_per_sec"] = samples_per_sec * static_cast<double>(label_width_);
  }
  write_line(j.dump());
  if (!tensorboard_) return;
  SummaryWriter& train = tensorboard_->train();
  train.scalar("batch_loss", step, loss);
  train.scalar("batch_accuracy", step, accuracy);
  if (sequence) train.scalar("batch_perplexity", step, std::exp(loss));
  train.flush();
}

namespace {
nlohmann::json membership_json(const MembershipChange& c) {
  return {{"generation", c.generation},       {"unix_time", c.unix_time},
          {"left", c.left},                   {"joined", c.joined}, {"step", c.step},
          {"training_tasks", c.training_tasks}, {"accumulation_steps", c.accumulation_steps},
          {"micro_batches", c.micro_batches},
          {"reform_seconds", c.reform_seconds}, {"resumed_unix_time", c.resumed_unix_time}};
}
}  // namespace

void MetricsLog::membership(const MembershipChange& change) {
  nlohmann::json j = membership_json(change);
  j["kind"] = "membership";
  write_line(j.dump());
}

void MetricsLog::epoch(const EpochReport& r, int64_t global_step) {
  nlohmann::json j{{"kind", "epoch"}, {"epoch", r.epoch}, {"step", global_step}, {"steps", r.steps},
                   {"loss", number(r.loss)}, {"accuracy", r.accuracy}, {"seconds", r.seconds},
                   {"samples_per_sec", r.samples_per_sec}, {"learning_rate", r.learning_rate},
                   {"step_ms", r.step_ms},           {"comm_wait_share", r.comm_wait_share}};
  if (r.has_validation) {
    j["val_loss"] = number(r.val_loss);
    j["val_accuracy"] = r.val_accuracy;
  }
  if (r.loss_scale) j["loss_scale"] = *r.loss_scale;
  const bool sequence = r.label_width > 1;
  if (sequence) {
    j["perplexity"] = number(std::exp(r.loss));
    j["tokens_per_sec"] = r.tokens_per_sec;
    if (r.has_validation) j["val_perplexity"] = number(std::exp(r.val_loss));
  }
  write_line(j.dump());
  if (!tensorboard_) return;
  // Keras writes epoch summaries at the 0-based epoch.
  const int64_t at = r.epoch - 1;
  SummaryWriter& train = tensorboard_->train();
  train.scalar("epoch_loss", at, r.loss);
  train.scalar("epoch_accuracy", at, r.accuracy);
  train.scalar("epoch_learning_rate", at, r.learning_rate);
  train.scalar("epoch_samples_per_sec", at, r.samples_per_sec);
  train.scalar("epoch_step_ms", at, r.step_ms);
  train.scalar("epoch_comm_wait_share", at, r.comm_wait_share);
  if (sequence) {
    train.scalar("epoch_perplexity", at, std::exp(r.loss));
    train.scalar("epoch_tokens_per_sec", at, r.tokens_per_sec);
  }
  if (r.has_validation) {
    SummaryWriter& validation = tensorboard_->validation();
    validation.scalar("epoch_loss", at, r.val_loss);
    validation.scalar("epoch_accuracy", at, r.val_accuracy);
    if (sequence) validation.scalar("epoch_perplexity", at, std::exp(r.val_loss));
  }
  tensorboard_->flush();
}

void MetricsLog::evaluation(int64_t step, double loss, double accuracy) {
  nlohmann::json j{{"kind", "eval"}, {"step", step}, {"test_loss", number(loss)}, {"test_accuracy", accuracy}};
  const bool sequence = label_width_ > 1;
  if (sequence) j["test_perplexity"] = number(std::exp(loss));
  write_line(j.dump());
  if (!tensorboard_) return;
  SummaryWriter& evaluation = tensorboard_->evaluation();
  evaluation.scalar("evaluation_loss_vs_iterations", step, loss);
  evaluation.scalar("evaluation_accuracy_vs_iterations", step, accuracy);
  if (sequence) evaluation.scalar("evaluation_perplexity_vs_iterations", step, std::exp(loss));
  evaluation.flush();
}

std::string tensorboard_dir(const job::JobConfig& job) {
  if (job.output.dir.empty() || !job.output.tensorboard) return "";
  return (std::filesystem::path(job.output.dir) / "tensorboard").string();
}

namespace {

// `j` into `path`, whole (core/files.h).
void write_json_file(const std::string& path, const nlohmann::json& j) {
  write_text_file(path, "--summary", j.dump(2) + "\n");
}

}  // namespace

void write_ps_summary(const std::string& path, const job::JobConfig& job, const PsTaskSummary& s) {
  nlohmann::json j;
  j["strategy"] = "parameter_server";
  j["role"] = "ps";
  j["world_size"] = s.world_size;
  j["variable_floats"] = s.variable_floats;
  j["updates_applied"] = s.updates_applied;
  j["wall_seconds"] = s.wall_seconds;
  j["config_sha256"] = sha256_hex(job.normalized_json);
  j["dtrain_version"] = DTRAIN_VERSION;
  write_json_file(path, j);
}

void write_summary(const std::string& path, const job::JobConfig& job, const RunSummary& s,
                   const std::string& strategy) {
  nlohmann::json j;
  const bool has_test = s.test_accuracy >= 0.0;
  j["test_accuracy"] = has_test ? nlohmann::json(s.test_accuracy) : nlohmann::json();
  j["test_loss"] = has_test ? number(s.test_loss) : nlohmann::json();
  j["train_loss"] = number(s.train_loss);
  j["train_accuracy"] = s.train_accuracy;
  if (s.label_width > 1) {  // a sequence's labels: the figures per token
    j["tokens_per_sample"] = s.label_width;
    j["train_perplexity"] = number(std::exp(s.train_loss));
    j["test_perplexity"] = has_test ? number(std::exp(s.test_loss)) : nlohmann::json();
  }
  j["epochs"] = s.epochs;
  if (s.stopped_epoch > 0) j["stopped_epoch"] = s.stopped_epoch;
  if (s.restored_epoch > 0) j["restored_epoch"] = s.restored_epoch;
  j["steps"] = s.steps;
  j["global_batch_size"] = s.global_batch_size;
  j["train_samples_per_sec"] = s.train_samples_per_sec;
  if (s.label_width > 1) j["train_tokens_per_sec"] = s.train_samples_per_sec * static_cast<double>(s.label_width);
  j["wall_seconds"] = s.wall_seconds;
  j["world_size"] = s.world_size;
  j["gradient_accumulation_steps"] = s.gradient_accumulation_steps;
  j["comm_wait_share"] = s.comm_wait_share;
  j["threads"] = s.threads;
  j["device"] = s.device;
  j["precision"] = config::precision_name(job.train.precision);
  j["strategy"] = strategy;
  // (none on a parameter_server worker: the coordinator's summary has the final parameters')
  j["params_sha256"] = s.params_sha256.empty() ? nlohmann::json() : nlohmann::json(s.params_sha256);
  j["optimizer_state_bytes"] = s.optimizer_state_bytes;
  if (s.utilization) j["utilization"] = nlohmann::json::parse(utilization_json(*s.utilization));
  if (s.loss_scale) {
    j["loss_scale"] = *s.loss_scale;
    j["loss_scale_skipped_steps"] = s.loss_scale_skipped_steps;
  }
  j["config_sha256"] = sha256_hex(job.normalized_json);
  j["dtrain_version"] = DTRAIN_VERSION;
  if (s.step_ms) {
    // step_ms as in metrics.jsonl and TensorBoard (a number); where it went, by part.
    j["step_ms"] = s.step_ms->step;
    j["step_ms_parts"] = {{"data", s.step_ms->data},       {"compute", s.step_ms->compute},
                          {"gradient_wait", s.step_ms->gradient_wait}, {"update", s.step_ms->update},
                          {"metrics", s.step_ms->metrics}, {"other", s.step_ms->other}};
  }
  if (!s.strategy_report.empty()) j[strategy] = nlohmann::json::parse(s.strategy_report);
  if (!s.membership_changes.empty()) {
    j["membership_changes"] = nlohmann::json::array();
    for (const MembershipChange& c : s.membership_changes) j["membership_changes"].push_back(membership_json(c));
  }
  if (s.work_units)
    j["work_units"] = {{"total", s.work_units->total},
                       {"completed", s.work_units->completed},
                       {"requeued", s.work_units->requeued},
                       {"workers_lost", s.work_units->workers_lost}};
  if (s.memory)
    j["memory"] = {{"parameters", s.memory->parameters},       {"gradients", s.memory->gradients},
                   {"optimizer_slots", s.memory->optimizer_slots}, {"accumulation", s.memory->accumulation},
                   {"weight_copies", s.memory->weight_copies}, {"activations", s.memory->activations},
                   {"backward_buffers", s.memory->backward_buffers}, {"total", s.memory->total},
                   {"limit", s.memory->limit_bytes}};
  if (s.memory && s.measured_memory)
    j["memory"]["measured"] = {{"before_model", s.measured_memory->before_model},
                               {"data", s.measured_memory->data},
                               {"peak", s.measured_memory->peak},
                               {"peak_from_loop", s.measured_memory->peak_from_loop},
                               {"training", s.measured_memory->training()}};
  if (s.evaluations) {
    j["evaluations"] = nlohmann::json::array();
    for (const Evaluation& e : *s.evaluations) {
      nlohmann::json one{
          {"step", e.step}, {"test_loss", number(e.loss)}, {"test_accuracy", e.accuracy}, {"checkpoint", e.checkpoint}};
      if (s.label_width > 1) one["test_perplexity"] = number(std::exp(e.loss));
      j["evaluations"].push_back(one);
    }
  }

  write_json_file(path, j);
}

void check_fresh_output(const job::JobConfig& job) {
  if (job.checkpoint.resume || job.output.overwrite) return;
  std::vector<std::string> found;
  std::error_code ec;
  if (!job.output.dir.empty()) {
    const uintmax_t size = std::filesystem::file_size(std::filesystem::path(job.output.dir) / "metrics.jsonl", ec);
    if (!ec && size > 0) found.push_back("metrics.jsonl");
  }
  const std::string checkpoints = checkpoint_dir(job);
  if (!checkpoints.empty() && std::filesystem::is_directory(checkpoints, ec)) {
    const std::vector<checkpoint::CheckpointEntry> entries = checkpoint::CheckpointStore(checkpoints).entries();
    const bool inside = job.checkpoint.dir.empty();  // (output.dir/checkpoints)
    if (!entries.empty())
      found.push_back(str(entries.size(), entries.size() == 1 ? " checkpoint" : " checkpoints", " in ",
                          inside ? std::string("checkpoints/") : checkpoints, ", the newest of step ",
                          entries.back().step));
  }
  if (found.empty()) return;
  const bool output = !job.output.dir.empty();
  const std::string where = output ? job.output.dir : checkpoints;
  throw ConfigError(str(job.source, ": ", output ? "output.dir" : "checkpoint.dir", " '", where,
                        "' holds an earlier run's results (", join(found, "; "),
                        ") that this run would overwrite: --resume continues that run, --set ",
                        output ? "output.dir=" : "checkpoint.dir=", where, "-2 writes a new one, --overwrite "
                        "replaces them"));
}

void clear_earlier_results(const job::JobConfig& job) {
  if (job.checkpoint.resume || !job.output.overwrite) return;
  std::error_code ec;
  const std::string checkpoints = checkpoint_dir(job);
  size_t removed = 0;
  if (!checkpoints.empty() && std::filesystem::is_directory(checkpoints, ec))
    for (const checkpoint::CheckpointEntry& e : checkpoint::CheckpointStore(checkpoints).entries())
      removed += std::filesystem::remove_all(e.path, ec) > 0 ? 1 : 0;
  if (!job.output.dir.empty()) {
    const std::filesystem::path dir(job.output.dir);
    std::filesystem::remove(dir / "metrics.jsonl", ec);
    if (const std::string events = tensorboard_dir(job); !events.empty()) std::filesystem::remove_all(events, ec);
  }
  if (removed > 0) log::info("output: --overwrite: removed the earlier run's ", removed, " checkpoint(s) in ", checkpoints);
}

}  // namespace dtrain::trainer
