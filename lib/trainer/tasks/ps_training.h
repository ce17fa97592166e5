// The training loops of a parameter_server job (private to lib/trainer): the
// coordinator's (the chief: opens the work queue, watches for lost workers and
// requeues their units, logs, evaluates after each epoch, checkpoints) and the
// worker's (takes work units, trains them through the ParameterServerStrategy).
#pragma once

#include "trainer/trainer.h"

namespace dtrain::trainer {

RunSummary run_ps_coordinator(const job::JobConfig& job, const plan::ExecutionPlan& plan, const RunOptions& options);
RunSummary run_ps_worker(const job::JobConfig& job, const plan::ExecutionPlan& plan, const RunOptions& options);

}  // namespace dtrain::trainer
