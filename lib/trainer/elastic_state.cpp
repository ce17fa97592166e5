// Implementation of elastic_state.h.
#include "trainer/elastic_state.h"

#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"

namespace dtrain::trainer {

void ElasticState::lay_out(strategy::Strategy& s) {
  entries_.clear();
  size_t offset = 0;
  const auto add = [&](const std::vector<nn::Param*>& params, bool optimizer) {
    for (const nn::Param* p : params) {
      entries_.push_back({p->name, p->value.shape(), offset, optimizer});
      offset += static_cast<size_t>(p->value.numel());
    }
  };
  add(s.model().params(), false);
  add(s.optimizer().state(), true);
  values_.resize(offset);
}

void ElasticState::capture(strategy::Strategy& s, const ResumePoint& point) {
  const std::vector<nn::Param*> model = s.model().params();
  const std::vector<nn::Param*> slots = s.optimizer().state();
  // The optimizer's slots come into being at the first update: lay out again then.
  if (entries_.size() != model.size() + slots.size()) lay_out(s);
  size_t i = 0;
  for (const auto* list : {&model, &slots})
    for (const nn::Param* p : *list) {
      const Entry& e = entries_[i++];
      if (e.name != p->name || e.shape != p->value.shape())
        throw InternalError(str("elastic: the strategy's tensor '", p->name, "' is not the one captured before"));
      p->value.copy_to_host(values_.data() + e.offset);
    }
  point_ = point;
  loss_scale_.reset();
  if (const optim::DynamicLossScale* scale = s.loss_scale()) loss_scale_ = scale->state();
  captured_ = true;
}

std::string ElasticState::point_json() const {
  // (-1 steps without a snapshot: a task that joins is never the source)
  nlohmann::json j = {{"global_step", captured_ ? point_.global_step : -1},
                      {"epoch", point_.epoch},
                      {"step_in_epoch", point_.step_in_epoch}};
  j["callbacks"] = point_.callbacks_json;
  const nn::LossStats& e = point_.epoch_stats;
  j["epoch_stats"] = {e.loss_sum, e.correct, e.count, e.tokens};
  if (loss_scale_)
    j["loss_scale"] = {{"scale", loss_scale_->scale},
                       {"good_steps", loss_scale_->good_steps},
                       {"skipped_steps", loss_scale_->skipped_steps}};
  nlohmann::json tensors = nlohmann::json::array();
  for (const Entry& e : entries_) tensors.push_back({e.name, e.shape, e.optimizer});
  j["tensors"] = std::move(tensors);
  return j.dump();
}

std::pair<int64_t, int64_t> ElasticState::progress_of(const std::string& point_json) {
  const nlohmann::json j = nlohmann::json::parse(point_json);
  return {j.at("global_step").get<int64_t>(), j.value("epoch", int64_t{0})};
}

ResumePoint ElasticState::restore(strategy::Strategy& s, comm::Communicator& workers, int source,
                                  const std::string& source_point) {
  const nlohmann::json j = nlohmann::json::parse(source_point);
  // The source's layout: a member a step behind may not have the optimizer's
  // slots yet, and a new member has nothing at all.
  std::vector<Entry> entries;
  size_t total = 0;
  for (const nlohmann::json& t : j.at("tensors")) {
    entries.push_back({t.at(0).get<std::string>(), t.at(1).get<Shape>(), total, t.at(2).get<bool>()});
    total += static_cast<size_t>(shape_numel(entries.back().shape));
  }
  if (workers.rank() == source && total != values_.size())
    throw InternalError("elastic: the source's snapshot does not match the layout it posted");
  values_.resize(total);
  workers.broadcast(values_.data(), values_.size(), source);
  entries_ = std::move(entries);

  std::map<std::string, Tensor> model, optimizer;
  for (const Entry& e : entries_) {
    Tensor t(e.shape);
    t.copy_from_host(values_.data() + e.offset);
    (e.optimizer ? optimizer : model).emplace(e.name, std::move(t));
  }
  const auto lookup = [](const std::map<std::string, Tensor>& in) {
    return [&in](const std::string& name) -> const Tensor* {
      const auto it = in.find(name);
      return it == in.end() ? nullptr : &it->second;
    };
  };
  s.load_state(lookup(model), lookup(optimizer));

  point_.global_step = j.at("global_step").get<int64_t>();
  point_.epoch = j.at("epoch").get<int64_t>();
  point_.step_in_epoch = j.at("step_in_epoch").get<int64_t>();
  point_.callbacks_json = j.at("callbacks").get<std::string>();
  const nlohmann::json& e = j.at("epoch_stats");
  point_.epoch_stats = {e.at(0).get<double>(), e.at(1).get<int64_t>(), e.at(2).get<int64_t>(), e.at(3).get<int64_t>()};
  point_.resumed = true;
  loss_scale_.reset();
  if (j.contains("loss_scale")) {
    const nlohmann::json& l = j["loss_scale"];
    loss_scale_ = optim::LossScaleState{l.at("scale").get<double>(), l.at("good_steps").get<int64_t>(),
                                        l.at("skipped_steps").get<int64_t>()};
    if (optim::DynamicLossScale* scale = s.loss_scale()) scale->restore(*loss_scale_);
  }
  captured_ = true;
  return point_;
}

}  // namespace dtrain::trainer
