// Implementation of bench_ps.h. Store keys live under "bench/ps/<size index>/".
#include "ps/bench_ps.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/strings.h"
#include "core/timer.h"
#include "optim/optimizer.h"
#include "ps/ps_client.h"
#include "ps/ps_server.h"
#include "ps/shard_store.h"

namespace dtrain::ps {
namespace {

std::string key(size_t size_index, const std::string& name) { return str("bench/ps/", size_index, "/", name); }

// Waits for `keys` in slices of a second, checking the job's health between them.
void wait_for(rendezvous::Store& store, const std::vector<std::string>& keys, const PsBenchOptions& options,
              const std::string& what) {
  Stopwatch waited;
  while (!store.wait(keys, 1.0)) {
    if (options.check_health) options.check_health();
    if (waited.seconds() > options.deadline)
      throw TimeoutError(str("bench ps: ", what, " did not happen within ", options.deadline, " s"));
  }
}

// Every worker gets here before any goes on.
void barrier(rendezvous::Store& store, const std::string& name, const PsBenchOptions& options) {
  const auto n = static_cast<int64_t>(options.workers.size());
  if (store.add(name, 1) == n) store.set(name + "/go", "1");
  wait_for(store, {name + "/go"}, options, str("barrier ", name, " of ", n, " workers"));
}

// One float32 variable of `bytes` split into one shard per ps (fewer when it has fewer elements).
Placement bench_placement(size_t bytes, int num_ps) {
  const auto elements = static_cast<int64_t>(bytes / sizeof(float));
  PartitionerSpec fixed;
  fixed.type = PartitionerSpec::Type::kFixed;
  fixed.num_shards = std::min<int64_t>(num_ps, elements);
  return plan_placement({{"bench/variable", Shape{elements}, true}}, num_ps, fixed);
}

optim::OptimizerSpec plain_sgd() {
  optim::OptimizerSpec sgd;
  sgd.type = &optim::optimizer_type("sgd");
  sgd.learning_rate.initial_learning_rate = 1.0;
  return sgd;
}

size_t largest_part(const Placement& placement) {
  int64_t most = 0;
  for (int p = 0; p < placement.num_ps; ++p) most = std::max(most, placement.ps_elements(p));
  return static_cast<size_t>(most) * sizeof(float);
}

// Whether every value pulled equals `expected`.
bool all_equal(const std::vector<std::vector<float>>& values, float expected) {
  for (const auto& part : values)
    for (float v : part)
      if (v != expected) return false;
  return true;
}

}  // namespace

void serve_ps_bench(rendezvous::Store& store, int ps_index, const std::string& host, const PsBenchOptions& options) {
  PsServerOptions server_options;
  server_options.credentials = options.credentials;
  server_options.task = str("ps:", ps_index);
  server_options.workers = options.workers;
  for (size_t i = 0; i < options.sizes.size(); ++i) {
    const Placement placement = bench_placement(options.sizes[i], options.num_ps);
    const std::vector<float> zeros(options.sizes[i] / sizeof(float), 0.0f);
    ShardStore shards(placement, ps_index, {zeros.data()}, plain_sgd());
    PsServer server(shards, server_options, -1, "0.0.0.0", 0);
    store.set(key(i, str("address/", ps_index)), str(host, ":", server.port()));
    // Served until worker 0 has every worker's figures for this size.
    Stopwatch served;
    while (!store.wait({key(i, "done")}, 1.0)) {
      if (options.check_health) options.check_health();
      const double limit = options.deadline * (options.iterations + options.warmup + 4);
      if (served.seconds() > limit)
        throw TimeoutError(str("bench ps: the workers did not finish ", options.sizes[i], " bytes within ", limit, " s"));
    }
  }
}

std::vector<PsBenchResult> run_ps_bench_worker(rendezvous::Store& store, int worker_index,
                                               const PsBenchOptions& options) {
  const int n = static_cast<int>(options.workers.size());
  const float expected = static_cast<float>(n * (n + 1) / 2);
  PsClientOptions client;
  client.credentials = options.credentials;
  client.task = options.workers.at(static_cast<size_t>(worker_index));
  client.connect_timeout = options.deadline;
  client.request_timeout = options.deadline;
  std::vector<PsBenchResult> results;
  for (size_t i = 0; i < options.sizes.size(); ++i) {
    const Placement placement = bench_placement(options.sizes[i], options.num_ps);
    std::vector<std::string> address_keys;
    for (int p = 0; p < options.num_ps; ++p) address_keys.push_back(key(i, str("address/", p)));
    wait_for(store, address_keys, options, "the ps tasks' addresses");
    std::vector<std::string> addresses;
    for (const std::string& k : address_keys) addresses.push_back(store.get(k).value_or(""));
    PsGroup group(placement, addresses, client);

    std::vector<std::vector<float>> payloads(static_cast<size_t>(options.num_ps)), values;
    for (int p = 0; p < options.num_ps; ++p)
      payloads[p].assign(static_cast<size_t>(placement.ps_elements(p)), -static_cast<float>(worker_index + 1));
    int64_t clock = 0;
    group.start_push(payloads, clock++);
    group.finish(values);
    barrier(store, key(i, "checked"), options);
    group.start_pull();
    group.finish(values);
    bool correct = all_equal(values, expected);
    for (auto& part : payloads) std::fill(part.begin(), part.end(), 0.0f);

    const auto timed = [&](bool push) {
      for (int k = 0; k < options.warmup; ++k) {
        push ? group.start_push(payloads, clock++) : group.start_pull();
        group.finish(values);
      }
      barrier(store, key(i, push ? "push" : "pull"), options);
      Stopwatch t;
      for (int k = 0; k < options.iterations; ++k) {
        push ? group.start_push(payloads, clock++) : group.start_pull();
        group.finish(values);
      }
      return t.seconds() * 1e6 / options.iterations;
    };
    PsBenchResult r;
    r.bytes = options.sizes[i];
    r.bytes_per_ps = largest_part(placement);
    r.workers = n;
    r.ps = options.num_ps;
    r.iterations = options.iterations;
    r.pull_us = timed(false);
    r.push_us = timed(true);
    group.start_pull();
    group.finish(values);
    correct = correct && all_equal(values, expected);
    group.bye();
    store.set(key(i, str("result/", worker_index)), str(r.pull_us, " ", r.push_us, " ", correct ? 1 : 0));
    barrier(store, key(i, "finished"), options);

    if (worker_index == 0) {  // the job's figures: the workers' mean times
      r.pull_us = r.push_us = 0.0;
      r.correct = true;
      for (int w = 0; w < n; ++w) {
        const std::string text = store.get(key(i, str("result/", w))).value_or("0 0 0");
        double pull = 0, push = 0;
        int ok = 0;
        if (std::sscanf(text.c_str(), "%lf %lf %d", &pull, &push, &ok) != 3) ok = 0;
        r.pull_us += pull / n;
        r.push_us += push / n;
        r.correct = r.correct && ok == 1;
      }
      store.set(key(i, "done"), "1");
    } else {
      r.correct = correct;
    }
    const double bytes_moved = static_cast<double>(n) * static_cast<double>(r.bytes_per_ps);
    r.pull_mbps_per_ps = bytes_moved / std::max(r.pull_us, 1e-9);  // bytes per us = MB/s
    r.push_mbps_per_ps = bytes_moved / std::max(r.push_us, 1e-9);
    results.push_back(r);
  }
  return results;
}

std::string to_json(const PsBenchResult& r) {
  return nlohmann::json{{"bytes", r.bytes},
                        {"bytes_per_ps", r.bytes_per_ps},
                        {"workers", r.workers},
                        {"ps", r.ps},
                        {"iterations", r.iterations},
                        {"pull_us", r.pull_us},
                        {"push_us", r.push_us},
                        {"pull_mbps_per_ps", r.pull_mbps_per_ps},
                        {"push_mbps_per_ps", r.push_mbps_per_ps},
                        {"correct", r.correct}}
      .dump();
}

}  // namespace dtrain::ps
