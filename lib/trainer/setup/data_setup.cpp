// A task's data, from the job: sources loaded and checked against the model,
// the shard this task reads, the training and evaluation pipelines' options.
#include <algorithm>

#include "core/error.h"
#include "core/strings.h"
#include "trainer/setup/job_setup.h"

namespace dtrain::trainer {

void check_input_shape(const data::DataSourceSpec& spec, const Shape& sample_shape, const Shape& model_input) {
  if (shape_numel(sample_shape) != shape_numel(model_input))
    throw ConfigError(str("model.input_shape ", shape_str(model_input), " does not match the samples of ",
                          spec.path, ", which have shape ", shape_str(sample_shape),
                          "; set model.input_shape to [", join([&] {
                            std::vector<std::string> dims;
                            for (int64_t d : sample_shape) dims.push_back(std::to_string(d));
                            return dims;
                          }(), ", "), "]"));
}

namespace {

// " (data.train.files[0]: 'a.tfrecord' record 3 (byte offset 120), token 7 of
// 'input_ids')" where the source can say where a corpus token came from, else "".
std::string origin_of(const data::Dataset& ds, int64_t position) {
  return ds.token_origin ? str(" (", ds.token_origin(position), ")") : std::string();
}

// A token corpus' ids against the model: the samples' ids below the first layer's
// vocabulary (the embedding would fail on the first batch that holds one, without
// saying where it came from), the labels below the classes.
void check_token_ids(const data::DataSourceSpec& spec, const data::Dataset& ds, const strategy::ModelShapes& shapes) {
  const int64_t vocabulary = shapes.vocabulary.size;
  const data::Dataset::TokenAt input = ds.largest_token(/*labels=*/false);
  if (vocabulary > 0 && input.id >= vocabulary)
    throw ConfigError(str(spec.path, ": token id ", input.id, " of sample ", input.sample, origin_of(ds, input.position),
                          " is outside the model's vocabulary of ", vocabulary, " (", shapes.vocabulary.key,
                          "; ids 0..", vocabulary - 1, "); make ", shapes.vocabulary.key, " at least ", input.id + 1,
                          " or use the tokeniser the model was made for"));
  const int64_t classes = shapes.output.back();
  const data::Dataset::TokenAt label = ds.largest_token(/*labels=*/true);
  if (label.id >= classes)
    throw ConfigError(str(spec.path, ": label ", label.id, " of sample ", label.sample, origin_of(ds, label.position),
                          " is outside the model's ", classes, " classes (0..", classes - 1,
                          "); make the last Dense layer's units at least ", label.id + 1, " (the vocabulary)"));
}

}  // namespace

std::shared_ptr<data::Dataset> load_checked(const data::DataSourceSpec& spec, const nn::Sequential& model) {
  return load_checked(spec, strategy::ModelShapes{model.input_shape(), model.output_shape(), model.input_vocabulary()});
}

std::shared_ptr<data::Dataset> load_checked(const data::DataSourceSpec& spec, const strategy::ModelShapes& shapes) {
  auto dataset = std::make_shared<data::Dataset>(data::load_dataset(spec));
  check_input_shape(spec, dataset->sample_shape, shapes.input);
  const Shape& out = shapes.output;
  const int64_t width = dataset->label_width;
  if (width == 1 && out.size() != 1)
    throw ConfigError(str("model: the last layer outputs ", shape_str(out),
                          " per sample, but the losses need (classes,); end the model with Flatten and Dense"));
  // A sequence's labels: one per position of the model's (T, classes) output.
  if (width > 1 && (out.size() < 2 || shape_numel(out) / std::max<int64_t>(out.back(), 1) != width))
    throw ConfigError(str("model: the last layer outputs ", shape_str(out), " per sample, but ", spec.path,
                          " has ", width, " labels per sample (the next token at each of its ", width,
                          " positions); the model must output (", width, ", classes), e.g. end it with a Dense "
                          "layer applied at every position"));
  if (dataset->windowed()) {
    check_token_ids(spec, *dataset, shapes);
    return dataset;
  }
  const int64_t classes = out.back();
  if (dataset->max_label >= classes)
    throw ConfigError(str(spec.path, ": label ", dataset->max_label, " of sample ", dataset->max_label_index,
                      " is outside the model's ", classes, " classes (0..", classes - 1,
                      "); make the last Dense layer's units at least ", dataset->max_label + 1));
  return dataset;
}

data::ShardPolicy shard_policy(const job::JobConfig& job, int num_workers) {
  const data::ShardPolicy policy = job.data.shard_policy;
  if (policy != data::ShardPolicy::kAuto || num_workers == 1) return policy;
  const data::DataSourceSpec& train = job.data.train;
  // Token windows are dealt out to the workers like any samples (a text source's
  // are), however many files hold them.
  if (!train.format || !train.format->auto_shards_by_file || train.token_windows()) return data::ShardPolicy::kData;
  return data::expand_files(train).size() >= static_cast<size_t>(num_workers) ? data::ShardPolicy::kFile
                                                                              : data::ShardPolicy::kData;
}

data::DataSourceSpec task_source(const job::JobConfig& job, int worker_rank, int num_workers) {
  data::DataSourceSpec spec = job.data.train;
  if (num_workers == 1 || shard_policy(job, num_workers) != data::ShardPolicy::kFile) return spec;
  spec.files = data::expand_files(spec);
  if (spec.files.size() < static_cast<size_t>(num_workers))
    throw ConfigError(str("data.shard_policy: 'file' gives each worker its own files, but ", spec.path, " has ",
                          spec.files.size(), " file(s) for ", num_workers,
                          " workers; use \"data\" (shard by sample) or \"auto\""));
  std::vector<std::string> mine;
  for (size_t i = static_cast<size_t>(worker_rank); i < spec.files.size(); i += static_cast<size_t>(num_workers))
    mine.push_back(spec.files[i]);
  spec.files = mine;
  return spec;
}

data::PipelineOptions train_pipeline_options(const job::JobConfig& job, const strategy::Strategy& s,
                                             int worker_rank, int num_workers, int64_t prefetch) {
  data::PipelineOptions o;
  o.batch_size = job.train.batch_size_per_replica * s.local_replicas();
  o.shuffle_buffer = job.data.shuffle_buffer;
  o.seed = job.train.seed;
  o.drop_remainder = job.data.drop_remainder || s.num_replicas_in_sync() > 1;  // replicas need equal batches
  o.prefetch = prefetch;
  o.cache = job.data.cache;
  if (num_workers > 1 && shard_policy(job, num_workers) == data::ShardPolicy::kData) {
    o.shard_count = num_workers;
    o.shard_index = worker_rank;
  }
  return o;
}

int64_t steps_per_epoch(const job::JobConfig& job, const strategy::Strategy& s, const data::Pipeline& train) {
  const int64_t accumulation = job.train.gradient_accumulation_steps;
  int64_t steps = train.batches_per_epoch() / accumulation;
  if (job.train.steps_per_epoch > 0) steps = std::min(steps, job.train.steps_per_epoch);
  if (steps == 0)
    throw ConfigError(str("train.batch_size_per_replica: ", job.train.batch_size_per_replica, " x ",
                          s.local_replicas(), " replica(s) x ", accumulation,
                          " accumulation step(s) is more than the ", train.samples_per_epoch(),
                          " training samples this task sees per epoch; use a smaller batch"));
  return steps;
}

data::PipelineOptions eval_pipeline_options(const job::JobConfig& job, int64_t prefetch) {
  data::PipelineOptions o;
  o.batch_size = job.train.eval_batch_size > 0 ? job.train.eval_batch_size : job.train.batch_size_per_replica;
  o.seed = job.train.seed;
  o.prefetch = prefetch;
  o.cache = job.data.cache;
  return o;
}

}  // namespace dtrain::trainer
