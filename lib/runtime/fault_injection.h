// Injected faults (DTRAIN_INJECT, what `dtrain launch --inject` hands a task), for
// tests and demos of failure handling: kill@step=N makes the task SIGKILL itself
// when it reaches step N; kill@ckpt_byte=N once this process has written N bytes of
// checkpoint files (counted over every file of every save, so N can land inside the
// second checkpoint), to show that a crash while saving leaves earlier checkpoints
// loadable; kill@seconds=S S seconds after arming (any task type, a ps or an
// evaluator too). On a ps task, kill@step=N counts the updates that ps applied.
// stall_reader@step=N makes the training task's data reader block before step N
// (heartbeats go on: a stall, not a loss), to show a hang report naming it;
// skip_allreduce@step=N makes it leave out one gradient all-reduce at step N;
// bytes_per_pack=N gives it another gradient bucket size than the job's (after
// the tasks agreed on the job): the two hangs a mismatched collective makes.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::runtime {

struct InjectedFault {
  int64_t kill_step = -1;       // -1: none
  int64_t kill_ckpt_byte = -1;  // -1: none
  int64_t kill_seconds = -1;    // -1: none
  int64_t stall_reader_step = -1;  // -1: none
  int64_t skip_allreduce_step = -1;  // -1: none
  int64_t bytes_per_pack = -1;       // -1: the job's
};

// Parses a DTRAIN_INJECT value ("" = no fault); ConfigError for anything else.
InjectedFault parse_injected_fault(const std::string& text);

// Before a step's batches are read: stall_reader@step=N blocks (for good) at
// step N; skip_allreduce@step=N makes that step leave out one all-reduce.
void before_batch_if_injected(const InjectedFault& fault, int64_t step);

// Arms a kill@ckpt_byte fault (lib/checkpoint's write hook) or a kill@seconds
// timer and returns the kill@step step, or -1.
int64_t arm_injected_fault(const InjectedFault& fault);

}  // namespace dtrain::runtime
