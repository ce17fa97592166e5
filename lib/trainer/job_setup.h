// What every entry point of the trainer does before stepping: resolve the thread
// count, load the data, and check data against the model (private to lib/trainer).
#pragma once

#include <memory>

#include "config/job_config.h"
#include "data/dataset.h"
#include "nn/sequential.h"

namespace dtrain::trainer {

// runtime.threads, else OMP_NUM_THREADS, else all cores; applied to the compute backend.
int setup_threads(const config::JobConfig& job);

// Loads a data source and checks it against the model: sample size equals the
// model's input size, and every label is a valid class of the model's output.
std::shared_ptr<data::Dataset> load_checked(const config::DataSourceSpec& spec,
                                            const nn::Sequential& model);

// The sample-shape check alone (for validate, which reads only headers).
void check_input_shape(const config::DataSourceSpec& spec, const Shape& sample_shape,
                       const nn::Sequential& model);

}  // namespace dtrain::trainer
