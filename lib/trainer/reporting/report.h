// The report of a run (private to lib/trainer), after the training loop: the
// summary's figures from the loop's result, the parameters' hash, the run's
// last lines on stdout ("Test: ...", "Done: ... params_sha256 ...") and the
// --summary file. What only one kind of run measures (a strategy's step time
// breakdown, a coordinator's work units) its caller adds first.
#pragma once

#include <string>

#include "strategy/strategy.h"
#include "trainer/trainer.h"
#include "trainer/training_loop.h"

namespace dtrain::trainer {

// Fills `summary` from `loop` (epochs, steps, throughput, the last epoch's and
// the test figures), the parameters' hash (collective for strategies with
// sharded parameters) and `wall_seconds`; prints the test figures and the "Done:"
// line (`details`, e.g. ", 40 of 40 work units completed (...)", goes before the
// hash); writes options.summary_path.
void report_run(const job::JobConfig& job, const RunOptions& options, strategy::Strategy& strategy,
                const LoopResult& loop, double wall_seconds, const std::string& details, RunSummary& summary);

}  // namespace dtrain::trainer
