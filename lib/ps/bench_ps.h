// The push/pull benchmark behind `dtrain bench ps`: how fast workers move a
// model's bytes to and from the ps tasks over dtrain's own ps protocol, in
// nccl-tests' manner (per size: time of one operation and bandwidth, with a data
// check).
//
// For each size S, every ps serves its part of one float32 variable of S bytes
// (split into one shard per ps, as the fixed partitioner does) on a fresh port it
// publishes in the job's store, updated by plain SGD (learning rate 1). Every worker
// then, in phases separated by barriers through the store:
//   check   pushes the gradient -(w + 1) everywhere; once all pushed, a pull must
//           give exactly N(N + 1)/2 in every element (integers: exact in float32);
//   pull    times `iterations` pulls of the whole variable (one request per ps);
//   push    times `iterations` pushes of zero gradients (the reply carries the
//           values, as in training); a last pull must still give N(N + 1)/2.
// A worker's operation waits for every ps's reply. Figures per ps count every
// worker's bytes: N workers x S / M bytes per operation time.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "rendezvous/auth.h"
#include "rendezvous/store.h"

namespace dtrain::ps {

struct PsBenchOptions {
  std::vector<size_t> sizes;  // bytes of the variable (positive multiples of 4)
  int iterations = 20;
  int warmup = 5;
  rendezvous::Credentials credentials;
  std::vector<std::string> workers;  // the workers' task names, by index
  int num_ps = 1;
  double deadline = 120.0;  // seconds for each wait: addresses, barriers, one reply
  // Called between short waits: the cluster runtime checks the job's health here (may throw).
  std::function<void()> check_health;
};

struct PsBenchResult {
  size_t bytes = 0;         // the variable: what one worker pulls or pushes
  size_t bytes_per_ps = 0;  // the largest part one ps holds
  int workers = 0;
  int ps = 0;
  int iterations = 0;
  double pull_us = 0.0;            // one pull of every ps, averaged over the workers
  double push_us = 0.0;            // one push (and its reply of values)
  double pull_mbps_per_ps = 0.0;   // workers x bytes_per_ps / pull time, in 1e6 bytes/s
  double push_mbps_per_ps = 0.0;
  bool correct = false;            // every worker's checks held
};

// A ps task's part: serves each size until the workers are done with it.
// `host`: this ps's host as the cluster names it (the workers connect there).
void serve_ps_bench(rendezvous::Store& store, int ps_index, const std::string& host, const PsBenchOptions& options);

// A worker's part. Worker 0 returns the results of the whole job, the others their own.
std::vector<PsBenchResult> run_ps_bench_worker(rendezvous::Store& store, int worker_index,
                                               const PsBenchOptions& options);

// One result as a JSON object on one line (the keys are PsBenchResult's fields).
std::string to_json(const PsBenchResult& result);

}  // namespace dtrain::ps
