// Implementation of bench_rendezvous.h.
#include "rendezvous/bench_rendezvous.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "core/timer.h"

namespace dtrain::rendezvous {
namespace {

// A job description of the size a real one has (the job file without `task`):
// what every simulated task publishes and compares, as `dtrain run` does.
const char* const kJobDocument =
    R"({"data":{"format":"idx","path":"/usr/share/dataset-fashion-mnist","validation_split":0.1},)"
    R"("model":{"layers":[{"type":"Conv2D","filters":32,"kernel_size":3,"activation":"relu"},)"
    R"({"type":"MaxPooling2D","pool_size":2},{"type":"Conv2D","filters":64,"kernel_size":3,"activation":"relu"},)"
    R"({"type":"MaxPooling2D","pool_size":2},{"type":"Flatten"},{"type":"Dense","units":128,"activation":"relu"},)"
    R"({"type":"Dense","units":10}]},"optimizer":{"type":"adam","learning_rate":0.001},)"
    R"("train":{"batch_size":256,"epochs":3,"loss":"sparse_categorical_crossentropy","metrics":["accuracy"]},)"
    R"("strategy":{"type":"multi_worker_mirrored"},"checkpoint":{"dir":"ckpt","every_epochs":1},)"
    R"("runtime":{"heartbeat_interval":1.0,"heartbeat_timeout":10.0,"rendezvous_timeout":300}})";

}  // namespace

config::ClusterSpec bench_cluster(const BenchJob& job) {
  config::ClusterSpec spec;
  spec.tasks["chief"] = {str("127.0.0.1:", job.port)};
  auto& workers = spec.tasks["worker"];
  // Nobody listens at the workers' addresses: the rendezvous only names them.
  for (int i = 1; i < job.tasks; ++i) workers.push_back(str("127.0.0.1:", 20000 + i));
  return spec;
}

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string BenchJob::to_line() const {
  return str(tasks, " ", port, " ", credentials.job_id, " ", credentials.secret, " ", heartbeat_interval, " ",
             heartbeat_timeout, " ", rendezvous_timeout);
}

BenchJob BenchJob::from_line(const std::string& line) {
  BenchJob job;
  std::istringstream in(line);
  if (!(in >> job.tasks >> job.port >> job.credentials.job_id >> job.credentials.secret >> job.heartbeat_interval >>
        job.heartbeat_timeout >> job.rendezvous_timeout) ||
      job.tasks < 2)
    throw ConfigError("bench rendezvous: a worker process read no job on its stdin (it is started by `dtrain bench "
                      "rendezvous`, not by hand)");
  return job;
}

ServerOptions bench_server_options(const BenchJob& job) {
  ServerOptions options;
  options.credentials = job.credentials;
  options.heartbeat_timeout = job.heartbeat_timeout;
  options.chief = "chief:0";
  // Every task from the start: a task the server does not know yet is turned away.
  const config::ClusterSpec cluster = bench_cluster(job);
  for (const auto& t : cluster.all_tasks()) options.tasks.push_back({t.str(), cluster.address(t)});
  return options;
}

SessionSpec bench_task_spec(const BenchJob& job, int index, const config::ClusterSpec& cluster) {
  SessionSpec spec;
  spec.cluster.spec = cluster;
  spec.cluster.task = index == 0 ? config::TaskId{"chief", 0} : config::TaskId{"worker", index - 1};
  spec.cluster.source = "bench rendezvous";
  spec.credentials = job.credentials;
  spec.agreement = {{"config_sha256", sha256_hex(kJobDocument)}};
  spec.agreement_document = kJobDocument;
  spec.rendezvous_timeout = job.rendezvous_timeout;
  spec.heartbeat_interval = job.heartbeat_interval;
  spec.heartbeat_timeout = job.heartbeat_timeout;
  return spec;
}

TaskSlice::TaskSlice(const BenchJob& job, int first, int count, const std::shared_ptr<StoreServer>& server)
    : first_(first), tasks_(job.tasks) {
  // OpenSSL sets itself up on a process's first digest (about 1 ms here): before
  // the clock starts, as in `dtrain run`, which has hashed its job file by then.
  (void)hmac_sha256("warm", "up");
  const config::ClusterSpec cluster = bench_cluster(job);
  const std::string digest = cluster_digest(cluster);
  for (int i = first; i < first + count; ++i) {
    specs_.push_back(bench_task_spec(job, i, cluster));
    specs_.back().cluster_digest = digest;
    if (i == 0) specs_.back().server = server;
  }
  const size_t n = specs_.size();
  sessions_.resize(n);
  errors_.resize(n);
  joined_.assign(n, 0);
  threads_.reserve(n);
  // Every thread waits at the gate until start(), so that the tasks start
  // together (as tasks on their own machines do) instead of each competing
  // with the creation of the rest.
  for (size_t i = 0; i < n; ++i)
    threads_.emplace_back([this, i] {
      open_.wait(false);
      try {
        sessions_[i] = std::make_unique<ClusterSession>(std::move(specs_[i]));
        joined_[i] = steady_now_ns();
      } catch (const std::exception& e) {
        errors_[i] = e.what();
      }
    });
}

void TaskSlice::start() {
  open_.store(true);
  open_.notify_all();
}

void TaskSlice::wait_until_joined() {
  for (auto& t : threads_) t.join();
  threads_.clear();
  for (size_t i = 0; i < errors_.size(); ++i)
    if (!errors_[i].empty())
      throw RuntimeError(str("bench rendezvous: task ", first_ + static_cast<int>(i), " of ", tasks_,
                             " did not pass the barrier: ", errors_[i]));
  last_joined_ns_ = *std::max_element(joined_.begin(), joined_.end());
}

TaskSlice::~TaskSlice() {
  if (!threads_.empty()) {  // never started, or never waited for
    start();
    for (auto& t : threads_) t.join();
  }
  for (size_t i = sessions_.size(); i-- > 0;) sessions_[i].reset();
}

std::vector<int64_t> TaskSlice::wait_for_failure(const std::string& lost, double seconds, int& named) {
  std::vector<int64_t> found(sessions_.size(), -1);
  size_t left = sessions_.size();
  named = 0;
  const Stopwatch waited;
  while (left > 0 && waited.seconds() < seconds) {
    for (size_t i = 0; i < sessions_.size(); ++i) {
      if (found[i] >= 0) continue;
      if (const auto why = sessions_[i]->wait_for_failure(0.0)) {
        found[i] = steady_now_ns();
        named += why->find(lost) != std::string::npos ? 1 : 0;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (left > 0)
    throw RuntimeError(str("bench rendezvous: ", left, " of ", sessions_.size(), " tasks in this process had not heard of ",
                           lost, "'s loss after ", seconds, " s"));
  return found;
}

}  // namespace dtrain::rendezvous
