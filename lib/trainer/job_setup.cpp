// Implementation of job_setup.h.
#include "trainer/job_setup.h"

#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "kernels/ops.h"

namespace dtrain::trainer {

int setup_threads(const config::JobConfig& job) {
  int threads = static_cast<int>(job.runtime.threads);
  if (threads <= 0) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    if (env && std::atoi(env) > 0) threads = std::atoi(env);
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  kernels::set_num_threads(threads);
  return threads;
}

void check_input_shape(const config::DataSourceSpec& spec, const Shape& sample_shape,
                       const nn::Sequential& model) {
  if (shape_numel(sample_shape) != shape_numel(model.input_shape()))
    throw ConfigError(str("model.input_shape ", shape_str(model.input_shape()), " does not match the samples of ",
                          spec.path, ", which have shape ", shape_str(sample_shape),
                          "; set model.input_shape to [", join([&] {
                            std::vector<std::string> dims;
                            for (int64_t d : sample_shape) dims.push_back(std::to_string(d));
                            return dims;
                          }(), ", "), "]"));
}

std::shared_ptr<data::Dataset> load_checked(const config::DataSourceSpec& spec,
                                            const nn::Sequential& model) {
  auto dataset = std::make_shared<data::Dataset>(data::load_dataset(spec));
  check_input_shape(spec, dataset->sample_shape, model);
  const Shape& out = model.output_shape();
  if (out.size() != 1)
    throw ConfigError(str("model: the last layer outputs ", shape_str(out),
                          " per sample, but the losses need (classes,); end the model with Flatten and Dense"));
  if (dataset->max_label >= out[0])
    throw ConfigError(str(spec.path, ": label ", dataset->max_label, " of sample ", dataset->max_label_index,
                      " is outside the model's ", out[0], " classes (0..", out[0] - 1,
                      "); make the last Dense layer's units at least ", dataset->max_label + 1));
  return dataset;
}

}  // namespace dtrain::trainer
