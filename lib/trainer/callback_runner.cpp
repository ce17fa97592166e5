// Implementation of callback_runner.h.
#include "trainer/callback_runner.h"

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/strings.h"

namespace dtrain::trainer {

CallbackRunner::CallbackRunner(const job::JobConfig& job, strategy::Strategy& strategy, comm::Communicator* workers)
    : strategy_(strategy), workers_(workers), early_stopping_(job.train.early_stopping), save_best_(job.checkpoint) {}

void CallbackRunner::resume(const std::string& state_json) {
  if (state_json.empty()) return;
  const nlohmann::json j = nlohmann::json::parse(state_json);
  if (j.contains("early_stopping")) early_stopping_.restore_state(j["early_stopping"].dump());
  if (j.contains("save_best_only")) save_best_.restore_state(j["save_best_only"].dump());
}

std::string CallbackRunner::state_json() const {
  nlohmann::json j = nlohmann::json::object();
  if (early_stopping_.enabled()) j["early_stopping"] = nlohmann::json::parse(early_stopping_.state_json());
  if (save_best_.enabled()) j["save_best_only"] = nlohmann::json::parse(save_best_.state_json());
  return j.dump();
}

CallbackRunner::Decision CallbackRunner::on_epoch_end(int64_t epoch, const EpochReport& report) {
  Decision decision;
  const bool restore = early_stopping_.spec().restore_best_weights;
  // Keras keeps the first watched epoch's weights even when it does not improve
  // (a resumed job whose best came before the checkpoint).
  bool take_snapshot = restore && best_params_.empty() && epoch >= early_stopping_.spec().start_from_epoch;
  if (early_stopping_.enabled()) {
    const std::string& monitor = early_stopping_.spec().monitor.monitor;
    const double current = *monitored_value(report, monitor);  // job_config checked it is measured
    const auto verdict = early_stopping_.on_epoch_end(epoch, current);
    take_snapshot = take_snapshot || (restore && verdict.improved);
    decision.stop = verdict.stop;
  }
  if (save_best_.enabled()) {
    const std::optional<double> best = save_best_.best().best;
    const double current = *monitored_value(report, save_best_.monitor());
    decision.save = save_best_.on_epoch_end(current);
    if (decision.save)
      log::info("epoch ", epoch + 1, ": ", save_best_.monitor(), " improved from ",
                best ? str(*best) : std::string("none"), " to ", current, ", saving a checkpoint");
    else
      log::info("epoch ", epoch + 1, ": ", save_best_.monitor(), " did not improve from ", *best);
  }
  if (workers_) {
    // Every task computed the same figures from the same parameters; the chief's
    // verdict is still the one taken, so that no float rounding can split the tasks.
    float flags[2] = {decision.save ? 1.0f : 0.0f, decision.stop ? 1.0f : 0.0f};
    workers_->broadcast(flags, 2, 0);
    decision.save = flags[0] != 0.0f;
    decision.stop = flags[1] != 0.0f;
  }
  if (take_snapshot) snapshot(report);
  if (decision.stop)
    log::info("epoch ", epoch + 1, ": early stopping (", early_stopping_.spec().monitor.monitor, " has not improved by more than ",
              early_stopping_.spec().min_delta, " for ", early_stopping_.wait(), " epoch(s); best ",
              *early_stopping_.best().best, " at epoch ", early_stopping_.best_epoch() + 1, ")");
  return decision;
}

void CallbackRunner::snapshot(const EpochReport& report) {
  best_params_.clear();
  // clone(): a copy where the parameters are (to_host() would share a CPU tensor).
  // (ZeRO-3: the whole values, gathered for the copy; every task takes it at once)
  strategy_.with_whole_model([&](nn::Sequential& model) {
    for (const nn::Param* p : model.params()) best_params_.emplace(p->name, p->value.clone());
  });
  best_report_ = report;
}

std::optional<EpochReport> CallbackRunner::restore_best() {
  if (!early_stopping_.spec().restore_best_weights || best_params_.empty()) return std::nullopt;
  // The optimizer keeps its current state, as Keras' set_weights leaves it.
  std::map<std::string, Tensor> optimizer_state;
  for (const nn::Param* p : strategy_.optimizer().state()) optimizer_state.emplace(p->name, p->value.clone());
  const auto find_in = [](const std::map<std::string, Tensor>& m) {
    return [&m](const std::string& name) -> const Tensor* {
      const auto it = m.find(name);
      return it == m.end() ? nullptr : &it->second;
    };
  };
  strategy_.load_state(find_in(best_params_), find_in(optimizer_state));
  log::info("restoring the parameters from the end of the best epoch: ", best_report_->epoch);
  return best_report_;
}

}  // namespace dtrain::trainer
