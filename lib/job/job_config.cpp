// Implementation of job_config.h: the top-level keys are declared first (an
// unknown one is reported before anything else), then each section is read by its
// owner, in the order a reader of the file meets them.
#include "job/job_config.h"

#include "core/error.h"
#include "core/strings.h"
#include "nn/losses.h"
#include "strategy/registry.h"

namespace dtrain::job {
namespace {

// A Keras callback watching val_* needs the data the trainer evaluates after each epoch.
void check_monitor(const JobConfig& job, const config::MonitorSpec& m) {
  if (m.monitor.rfind("val_", 0) == 0 && !job.data.has_test)
    throw ConfigError(str(job.source, ": ", m.path, ".monitor: '", m.monitor,
                          "' is measured on data.test after each epoch, and this job has none; set data.test "
                          "or monitor '", m.monitor.substr(4), "'"));
}

}  // namespace

JobConfig parse_job_config(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  config::JobDocument document(text, source, overrides);
  config::Section& r = document.root();
  r.expect_keys({"device", "strategy", "model", "loss", "optimizer", "data", "train", "runtime", "output",
                 "checkpoint", "cluster", "task", "rpc_layer"});
  JobConfig job;
  job.source = document.source();
  if (const auto v = r.find("device")) job.device = config::read_device(*v);
  if (const auto v = r.find("strategy")) job.strategy = strategy::read_strategy_spec(*v);
  // A GPU, or "auto" (a GPU when one is usable: the runtime checks what it resolved to).
  const bool may_be_gpu = job.device.rfind("cpu", 0) != 0;
  strategy::check_communication_device(job.strategy, may_be_gpu, job.device, job.source);
  job.model = nn::read_model_spec(r.require("model"));
  job.loss = nn::read_loss_spec(r.require("loss"));
  job.optimizer = optim::read_optimizer_spec(r.require("optimizer"));
  job.data = data::read_data_spec(r.require("data"));
  data::use_model_input_shape(job.data, job.model.input_shape);
  job.train = config::read_train(r.require("train"));
  if (job.train.precision == config::Precision::kMixedBfloat16) job.model.compute_dtype = DType::kBF16;
  if (job.train.precision == config::Precision::kMixedFloat16) job.model.compute_dtype = DType::kF16;
  if (const auto v = r.find("runtime")) job.runtime = config::read_runtime(*v);
  if (const auto v = r.find("output")) job.output = config::read_output(*v);
  if (const auto v = r.find("checkpoint")) job.checkpoint = config::read_checkpoint(*v);
  config::read_cluster_keys(r, &job.cluster, &job.task);
  r.finish();
  if (job.train.early_stopping.enabled) check_monitor(job, job.train.early_stopping.monitor);
  if (job.checkpoint.save_best_only) check_monitor(job, job.checkpoint.monitor);
  if (const std::string w = nn::softmax_logits_warning(job.model, job.loss); !w.empty())
    job.warnings.push_back(str(job.source, ": ", w));
  job.normalized_json = document.normalized_json();
  job.agreement_json = document.agreement_json();
  return job;
}

JobConfig load_job_config(const std::string& file, const std::vector<std::string>& overrides) {
  return parse_job_config(config::read_job_text(file), file, overrides);
}

bool JobConfig::survives_lost_workers() const {
  return strategy::entry_of(strategy).cross_task == strategy::CrossTask::kParameterServer || strategy.elastic.on;
}

}  // namespace dtrain::job
