// Implementation of optimizer_spec.h: the optimizer section read through the
// optimizer and schedule registries. Keys are declared from the entries before
// anything is read, so a key of another type says whose it is ("'momentum'
// belongs to sgd optimizers").
#include "optim/optimizer_spec.h"

#include "core/strings.h"
#include "optim/clipping.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace dtrain::optim {
LearningRateSpec read_learning_rate_spec(const config::Value& value) {
  LearningRateSpec lr;
  lr.path = value.path();
  lr.type = &schedule_type("constant");
  if (value.is_number()) {
    lr.initial_learning_rate = value.to_double(config::kPositive);
    return lr;
  }
  if (!value.is_object())
    value.fail(str("expected a positive number or a schedule such as {\"type\": \"cosine\", "
                   "\"initial_learning_rate\": 0.1, \"decay_steps\": 1000}, got ",
                   value.describe()));
  config::Section r(value, "a learning-rate schedule");
  const ScheduleType& type = schedule_type(r.require_choice("type", config::entry_names(schedule_types()), "learning-rate schedule"));
  lr.type = &type;
  r.set_what(str(config::with_article(type.name), " learning-rate schedule"));
  // piecewise_constant has no initial_learning_rate: its rates are its values.
  const bool has_initial = type.takes_initial_learning_rate;
  std::vector<std::string> head = {"type"};
  if (has_initial) head.push_back("initial_learning_rate");
  r.expect_keys(config::declared_keys(head, type.keys, {"warmup_steps"}), [&type](const std::string& key) {
    if (key == "initial_learning_rate")
      return str(config::with_article(type.name), " schedule takes its rates from 'values' (the first one is the "
                 "initial rate)");
    return config::entry_key_note(schedule_types(), "schedules", key);
  });
  if (has_initial) lr.initial_learning_rate = r.require_double("initial_learning_rate", config::kPositive);
  type.read(r, lr);
  lr.warmup_steps = r.get_int("warmup_steps", lr.warmup_steps, 0);
  r.finish();
  return lr;
}

OptimizerSpec read_optimizer_spec(const config::Value& value) {
  OptimizerSpec opt;
  opt.path = value.path().empty() ? "optimizer" : value.path();
  opt.learning_rate.path = config::child_path(opt.path, "learning_rate");
  opt.learning_rate.type = &schedule_type("constant");
  const std::vector<std::string> names = config::entry_names(optimizer_types());
  if (value.is_string()) {
    opt.type = &optimizer_type(value.to_choice(names, "optimizer"));
    opt.learning_rate.initial_learning_rate = opt.type->default_learning_rate;
    return opt;
  }
  if (!value.is_object())
    value.fail(str("expected an optimizer name (one of ", join(names, ", "),
                   ") or an object such as {\"type\": \"adam\", \"learning_rate\": 0.001}, got ",
                   value.describe()));
  config::Section r(value, "the optimizer");
  opt.type = &optimizer_type(r.require_choice("type", names, "optimizer"));
  r.set_what(str("the ", opt.type->name, " optimizer"));
  r.expect_keys(config::declared_keys({"type", "learning_rate"}, opt.type->keys, config::key_names(clipping_keys())),
                [](const std::string& key) { return config::entry_key_note(optimizer_types(), "optimizers", key); });
  if (const auto lr = r.find("learning_rate"))
    opt.learning_rate = read_learning_rate_spec(*lr);
  else
    opt.learning_rate.initial_learning_rate = opt.type->default_learning_rate;
  opt.type->read(r, opt);
  read_clipping(r, opt);
  r.finish();
  return opt;
}

}  // namespace dtrain::optim
