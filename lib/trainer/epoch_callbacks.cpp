// Implementation of epoch_callbacks.h.
#include "trainer/epoch_callbacks.h"

#include <nlohmann/json.hpp>

namespace dtrain::trainer {
namespace {

nlohmann::json optional_to_json(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

std::optional<double> optional_from_json(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<double>();
}

}  // namespace

std::optional<double> monitored_value(const EpochReport& report, const std::string& monitor) {
  if (monitor == "loss") return report.loss;
  if (monitor == "accuracy") return report.accuracy;
  if (!report.has_validation) return std::nullopt;
  if (monitor == "val_loss") return report.val_loss;
  if (monitor == "val_accuracy") return report.val_accuracy;
  return std::nullopt;
}

bool MonitoredBest::improves_on(double current, const std::optional<double>& reference) const {
  if (!reference) return true;
  return maximize_ ? current - min_delta_ > *reference : current + min_delta_ < *reference;
}

EarlyStopping::EarlyStopping(const config::EarlyStoppingSpec& spec)
    : spec_(spec), best_(spec.monitor.maximize(), spec.min_delta) {}

EarlyStopping::Verdict EarlyStopping::on_epoch_end(int64_t epoch, double current) {
  Verdict verdict;
  if (!spec_.enabled || epoch < spec_.start_from_epoch) return verdict;
  ++wait_;
  if (best_.improves(current)) {
    best_.best = current;
    best_epoch_ = epoch;
    verdict.improved = true;
    // Only beating the baseline as well restarts the wait.
    if (!spec_.baseline || best_.improves_on(current, spec_.baseline)) wait_ = 0;
    return verdict;
  }
  if (wait_ >= spec_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    verdict.stop = true;
  }
  return verdict;
}

std::string EarlyStopping::state_json() const {
  return nlohmann::json{{"monitor", spec_.monitor.monitor},
                        {"best", optional_to_json(best_.best)},
                        {"best_epoch", best_epoch_},
                        {"wait", wait_}}
      .dump();
}

void EarlyStopping::restore_state(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json);
  // A checkpoint of a job that watched another figure: that best means nothing here.
  if (j.value("monitor", std::string()) != spec_.monitor.monitor) return;
  best_.best = optional_from_json(j, "best");
  best_epoch_ = j.value("best_epoch", int64_t{0});
  wait_ = j.value("wait", int64_t{0});
}

SaveBestOnly::SaveBestOnly(const config::CheckpointSpec& spec)
    : enabled_(spec.save_best_only), monitor_(spec.monitor.monitor), best_(spec.monitor.maximize(), 0.0) {}

bool SaveBestOnly::on_epoch_end(double current) {
  if (!best_.improves(current)) return false;
  best_.best = current;
  return true;
}

std::string SaveBestOnly::state_json() const {
  return nlohmann::json{{"monitor", monitor_}, {"best", optional_to_json(best_.best)}}.dump();
}

void SaveBestOnly::restore_state(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json);
  if (j.value("monitor", std::string()) == monitor_) best_.best = optional_from_json(j, "best");
}

}  // namespace dtrain::trainer
