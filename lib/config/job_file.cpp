// Implementation of job_file.h: the document (parse, overrides, normalised and
// agreement texts) and the sections config reads itself, with ObjectReader.
#include "config/job_file.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "config/cluster_reader.h"
#include "config/json_reader.h"
#include "config/overrides.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::config {
namespace {

const Json& json_of(const Value& v) { return *static_cast<const Json*>(v.json()); }

// "auto", "cpu", "gpu", "cuda", or one of the last three with ":N" (N up to 4 digits).
bool is_device_name(const std::string& d) {
  if (d == "auto") return true;
  for (const char* kind : {"cpu", "gpu", "cuda"}) {
    const std::string k = kind;
    if (d == k) return true;
    if (d.rfind(k + ":", 0) != 0) continue;
    const std::string digits = d.substr(k.size() + 1);
    return !digits.empty() && digits.size() <= 4 &&
           digits.find_first_not_of("0123456789") == std::string::npos;
  }
  return false;
}

// normalized_json without what may differ between the tasks of one job: the task,
// the device and runtime.threads (an emptied runtime section goes too, so that a task with
// --set runtime.threads=4 agrees with one without a runtime section).
std::string agreement_text(Json root) {
  root.erase("task");
  root.erase("device");  // each machine trains on what it has (a GPU here, the CPU there)
  const auto runtime = root.find("runtime");
  if (runtime != root.end() && runtime->is_object()) {
    runtime->erase("threads");
    runtime->erase("secret_file");  // each machine may keep the secret elsewhere
    runtime->erase("memory_limit");  // each machine has its own memory
    if (runtime->empty()) root.erase(runtime);
  }
  const auto checkpoint = root.find("checkpoint");
  if (checkpoint != root.end() && checkpoint->is_object()) {
    checkpoint->erase("resume");  // a resumed run is the same job
    if (checkpoint->empty()) root.erase(checkpoint);
  }
  return root.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

struct JobDocument::Impl {
  Context ctx;
  Json root;
  std::unique_ptr<Section> section;
};

JobDocument::JobDocument(const std::string& text, const std::string& source,
                         const std::vector<std::string>& overrides)
    : impl_(std::make_unique<Impl>()) {
  impl_->ctx.source = source;
  impl_->root = parse_json(text, impl_->ctx);
  if (!impl_->root.is_object())
    impl_->ctx.fail("", str("a job config must be a JSON object {...}, got ", describe(impl_->root)));
  apply_overrides(impl_->root, overrides, impl_->ctx);
  impl_->section = std::make_unique<Section>(Value(impl_->ctx, &impl_->root, ""), "the job");
}

JobDocument::~JobDocument() = default;
const std::string& JobDocument::source() const { return impl_->ctx.source; }
Section& JobDocument::root() { return *impl_->section; }
std::string JobDocument::normalized_json() const {
  return impl_->root.dump(-1, ' ', false, Json::error_handler_t::replace);
}
std::string JobDocument::agreement_json() const { return agreement_text(impl_->root); }

std::string read_job_text(const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) throw IoError(str("cannot read job config '", file, "': ", std::strerror(errno)));
  std::string text;
  char buffer[65536];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(f) != 0;
  const int error = errno;
  std::fclose(f);
  if (failed) throw IoError(str("cannot read job config '", file, "': ", std::strerror(error)));
  return text;
}

std::string read_device(const Value& value) {
  const std::string device = value.to_string();
  if (!is_device_name(device))
    value.fail(str("'", printable(device),
                   "' is not a device; use \"auto\" (the GPU when one is usable), \"cpu\", \"gpu\" or \"cuda:N\""));
  return device;
}

namespace {

// `monitor` and `mode` of a Keras callback's section.
MonitorSpec read_monitor(Section& r) {
  MonitorSpec m;
  m.path = r.path();
  m.monitor = r.get_choice("monitor", m.monitor, {"val_loss", "val_accuracy", "loss", "accuracy"}, "monitor");
  m.mode = r.get_choice("mode", m.mode, {"auto", "min", "max"}, "mode");
  return m;
}

EarlyStoppingSpec read_early_stopping(const Value& value) {
  EarlyStoppingSpec es;
  Section r(value, "the train.early_stopping section");
  r.expect_keys({"monitor", "mode", "min_delta", "patience", "baseline", "restore_best_weights", "start_from_epoch"});
  es.enabled = true;
  es.monitor = read_monitor(r);
  // Keras takes min_delta's absolute value; a negative one here is more likely a mistake.
  es.min_delta = r.get_double("min_delta", es.min_delta, kNonNegative);
  es.patience = r.get_int("patience", es.patience, 0);
  if (const auto b = r.find("baseline"); b && !b->is_null())
    es.baseline = b->to_double({-kInfinity, false, kInfinity, false, "a number"});
  es.restore_best_weights = r.get_bool("restore_best_weights", es.restore_best_weights);
  es.start_from_epoch = r.get_int("start_from_epoch", es.start_from_epoch, 0);
  r.finish();
  return es;
}

}  // namespace

bool MonitorSpec::maximize() const {
  if (mode != "auto") return mode == "max";
  return monitor.find("accuracy") != std::string::npos;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFloat32: return "float32";
    case Precision::kMixedBfloat16: return "mixed_bfloat16";
    case Precision::kMixedFloat16: return "mixed_float16";
  }
  return "?";
}

TrainSpec read_train(const Value& value) {
  TrainSpec train;
  Section r(value, "the train section");
  // Keras' fit(batch_size=...) is the global batch; dtrain's key is per replica.
  r.expect_keys({"epochs", "batch_size_per_replica", "seed", "steps_per_epoch", "log_every_steps",
                 "gradient_accumulation_steps", "deterministic", "eval_batch_size", "early_stopping", "precision"},
                [](const std::string& key) {
                  return key == "batch_size"
                             ? std::string("did you mean 'batch_size_per_replica'? The global batch is "
                                           "batch_size_per_replica x the replicas in sync (Keras' batch_size is "
                                           "the global one: divide it by the replicas)")
                             : std::string();
                });
  train.epochs = r.get_int("epochs", train.epochs, 1);
  train.batch_size_per_replica = r.get_int("batch_size_per_replica", train.batch_size_per_replica, 1);
  train.seed = static_cast<uint64_t>(r.get_int("seed", static_cast<int64_t>(train.seed), 0));
  train.steps_per_epoch = r.get_int("steps_per_epoch", train.steps_per_epoch, 0);
  train.log_every_steps = r.get_int("log_every_steps", train.log_every_steps, 0);
  train.eval_batch_size = r.get_int("eval_batch_size", train.eval_batch_size, 0);
  train.gradient_accumulation_steps = r.get_int("gradient_accumulation_steps", train.gradient_accumulation_steps, 1);
  train.deterministic = r.get_bool("deterministic", train.deterministic);
  if (const auto es = r.find("early_stopping"); es && !es->is_null()) train.early_stopping = read_early_stopping(*es);
  const std::string precision =
      r.get_choice("precision", "float32", {"float32", "mixed_bfloat16", "mixed_float16"}, "precision policy");
  if (precision == "mixed_bfloat16") train.precision = Precision::kMixedBfloat16;
  if (precision == "mixed_float16") train.precision = Precision::kMixedFloat16;
  r.finish();
  return train;
}

RuntimeSpec read_runtime(const Value& value) { return read_runtime(value.context(), json_of(value)); }

std::optional<int64_t> parse_byte_size(const std::string& text) {
  size_t i = 0;
  const auto skip_spaces = [&] {
    while (i < text.size() && text[i] == ' ') ++i;
  };
  skip_spaces();
  // The number: digits with at most one decimal point, at least one digit.
  const size_t start = i;
  bool point = false, digit = false;
  for (; i < text.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(text[i]))) {
      digit = true;
    } else if (text[i] == '.' && !point) {
      point = true;
    } else {
      break;
    }
  }
  if (!digit) return std::nullopt;
  const std::string number = text.substr(start, i - start);
  skip_spaces();
  std::string unit;
  for (; i < text.size() && std::isalpha(static_cast<unsigned char>(text[i])); ++i)
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  skip_spaces();
  if (i != text.size()) return std::nullopt;
  static const std::vector<std::pair<std::string, long double>> kUnits = {
      {"", 1.0L},          {"b", 1.0L},
      {"kb", 1e3L},        {"mb", 1e6L},           {"gb", 1e9L},           {"tb", 1e12L},
      {"kib", 1024.0L},    {"mib", 1048576.0L},    {"gib", 1073741824.0L}, {"tib", 1099511627776.0L}};
  for (const auto& [name, scale] : kUnits) {
    if (name != unit) continue;
    if (unit.empty() && point) return std::nullopt;  // a bare number is whole bytes
    const long double bytes = std::strtold(number.c_str(), nullptr) * scale;
    if (!(bytes < 9.2e18L)) return std::nullopt;
    return static_cast<int64_t>(bytes);
  }
  return std::nullopt;
}

OutputSpec read_output(const Value& value) {
  OutputSpec output;
  Section r(value, "the output section");
  r.expect_keys({"dir", "tensorboard", "trace", "overwrite"});
  if (const auto dir = r.find("dir")) output.dir = dir->to_string(true);
  output.tensorboard = r.get_bool("tensorboard", output.tensorboard);
  output.trace = r.get_bool("trace", output.trace);
  output.overwrite = r.get_bool("overwrite", output.overwrite);
  if (output.trace && output.dir.empty())
    r.fail("trace", "true needs output.dir, where trace.json is written; set output.dir");
  r.finish();
  return output;
}

CheckpointSpec read_checkpoint(const Value& value) {
  CheckpointSpec ck;
  Section r(value, "the checkpoint section");
  r.expect_keys({"dir", "every_steps", "every_epochs", "keep", "resume", "save_best_only", "monitor", "mode"});
  if (const auto dir = r.find("dir")) ck.dir = dir->to_string(true);
  ck.every_steps = r.get_int("every_steps", ck.every_steps, 0);
  ck.every_epochs = r.get_int("every_epochs", ck.every_epochs, 0);
  ck.keep = r.get_int("keep", ck.keep, 1);
  ck.resume = r.get_choice("resume", "never", {"never", "auto"}, "resume mode") == "auto";
  ck.save_best_only = r.get_bool("save_best_only", ck.save_best_only);
  ck.monitor = read_monitor(r);
  if (ck.save_best_only) {
    // The monitored figures exist at epoch ends; Keras' save_freq in batches compares
    // one batch's loss, which is noise. Epoch saves are what "best" means here.
    if (ck.every_steps > 0)
      r.fail("every_steps", "save_best_only compares the epochs' figures, so it saves at epoch ends; "
                            "remove checkpoint.every_steps (or save_best_only)");
    if (ck.every_epochs == 0) ck.every_epochs = 1;
  }
  r.finish();
  return ck;
}

void read_cluster_keys(Section& root, ClusterSpec* cluster, std::optional<TaskId>* task) {
  read_cluster_keys(root.reader(), cluster, task);
}

}  // namespace dtrain::config
