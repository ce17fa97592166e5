// Implementation of cluster_session.h.
//
// Store keys (one store per job): join/<task>, agree/<task>, compared/<task> (only
// when the descriptions differ), finish/<task>.
#include "rendezvous/cluster_session.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "config/json_diff.h"
#include "core/error.h"
#include "core/host.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "core/timer.h"

namespace dtrain::rendezvous {
namespace {

std::vector<std::string> keys_for(const std::string& prefix, const std::vector<config::TaskId>& tasks) {
  std::vector<std::string> keys;
  for (const auto& t : tasks) keys.push_back(prefix + t.str());
  return keys;
}

// "config_sha256=...;dtrain_version=...;world_size=..." as a map.
std::map<std::string, std::string> parse_fields(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
    start = end + 1;
  }
  return out;
}

}  // namespace

ClusterSession::ClusterSession(const SessionSpec& spec)
    : cluster_(spec.cluster),
      credentials_(spec.credentials),
      heartbeat_interval_(spec.heartbeat_interval),
      rendezvous_timeout_(spec.rendezvous_timeout),
      expendable_(spec.expendable) {
  Stopwatch& timer = started_;
  const config::TaskId chief = cluster_.spec.chief();
  const config::HostPort chief_address = config::parse_host_port(cluster_.spec.address(chief), "the chief's address");
  if (is_chief()) {
    ServerOptions so;
    so.credentials = credentials_;
    so.heartbeat_timeout = spec.heartbeat_timeout;
    so.chief = chief.str();
    so.expendable = spec.expendable;
    for (const auto& t : cluster_.spec.all_tasks()) so.tasks.push_back({t.str(), cluster_.spec.address(t)});
    // Listen on every interface of the chief's port, so the other machines reach it.
    if (spec.server) {
      server_ = spec.server;
      for (const auto& t : so.tasks) server_->set_task_address(t.name, t.address);
    } else {
      server_ = spec.listen_fd >= 0 ? std::make_shared<StoreServer>(spec.listen_fd, so)
                                       : std::make_shared<StoreServer>("0.0.0.0", chief_address.port, so);
    }
  }
  ClientOptions co;
  co.credentials = credentials_;
  co.task = cluster_.task.str();
  co.server_name = str("the chief (", describe(chief), ")");
  co.connect_timeout = rendezvous_timeout_;
  co.on_waiting = [](const std::string& message) { log::info("rendezvous: ", message); };
  const std::string host = is_chief() ? "127.0.0.1" : chief_address.host;
  store_ = std::make_unique<StoreClient>(host, chief_address.port, co);
  co.role = "control";
  co.request_timeout = spec.heartbeat_timeout;
  control_ = std::make_unique<StoreClient>(host, chief_address.port, co);
  heartbeat_thread_ = std::thread([this] { heartbeat_loop(); });
  try {
    wait_for_all_tasks();
    compare_job_descriptions(spec.agreement, spec.agreement_document);
  } catch (const Error& e) {
    // The destructor will not run: stop the heartbeats and tell the others why.
    stop_heartbeats();
    if (!dynamic_cast<const PeerLost*>(&e)) fail(str(cluster_.task.str(), ": ", e.what()));
    throw;
  }
  join_seconds_ = timer.seconds();
  for (const auto& t : cluster_.spec.all_tasks()) hosts_[t.str()] = store_->get("host/" + t.str()).value_or("");
  incarnation_ = std::stoll(store_->get("incarnation/" + cluster_.task.str()).value_or("1"));
  log::info("rendezvous: all ", cluster_.spec.all_tasks().size(), " tasks joined and agree (job ",
            credentials_.job_id, ", ", format_seconds(join_seconds_), ")");
}

int ClusterSession::tasks_on_this_host() const {
  const std::string& mine = hosts_.at(cluster_.task.str());
  return static_cast<int>(std::count_if(hosts_.begin(), hosts_.end(), [&](const auto& h) { return h.second == mine; }));
}

void ClusterSession::stop_heartbeats() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

trace::ClockOffset ClusterSession::measure_clock_offset() {
  return is_chief() ? trace::ClockOffset{} : store_->clock_offset();
}

ClusterSession::~ClusterSession() {
  stop_heartbeats();
  if (server_ && !finished_) {
    // The chief is going down with a failed job. Keep serving a little, so the
    // other tasks learn the real cause from their next heartbeat instead of
    // only seeing the chief vanish.
    server_->wait_all_done(2.0 * heartbeat_interval_ + 1.0);
  }
  if (!finished_ && store_) {
    try {
      store_->fail("it stopped before the end of the job (see its own output for why)");
    } catch (const std::exception&) {
      // The chief may be gone already; nothing more to tell.
    }
  }
}

std::string ClusterSession::describe(const config::TaskId& task) const {
  return str(task.str(), " at ", cluster_.spec.address(task));
}

void ClusterSession::wait_for_all_tasks() {
  const auto tasks = cluster_.spec.all_tasks();
  store_->set("host/" + cluster_.task.str(), host_identity());
  store_->set("join/" + cluster_.task.str(), "1");
  const auto keys = keys_for("join/", tasks);
  // The deadline counts from the session's start (connecting to the chief included).
  Stopwatch& waited = started_;
  // Waits of at most 5 s (then say who is missing), none past rendezvous_timeout.
  const auto next_wait = [&] { return std::clamp(rendezvous_timeout_ - waited.seconds(), 0.0, 5.0); };
  while (!store_->wait(keys, next_wait())) {
    std::vector<std::string> missing, joined;
    for (const auto& t : tasks) (store_->get("join/" + t.str()) ? joined : missing).push_back(describe(t));
    if (waited.seconds() >= rendezvous_timeout_)
      throw TimeoutError(str("rendezvous: after ", rendezvous_timeout_, " s these tasks have not joined: ",
                             dtrain::join(missing, ", "), "; start them (same job file) or raise runtime.rendezvous_timeout"));
    log::info("rendezvous: waiting for ", dtrain::join(missing, ", "), " (joined: ", dtrain::join(joined, ", "), ")");
    check_health();
  }
}

namespace {

// " (the keys that differ: train.epochs is 2 on worker:1 and 1 on worker:0, ...)"
std::string document_differences(const std::string& theirs, const std::string& mine, const std::string& them,
                                 const std::string& me) {
  const auto differences = config::json_differences(theirs, mine);
  if (differences.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& d : differences)
    parts.push_back(str(d.path.empty() ? "the whole config" : d.path, " is ", d.left, " on ", them, " and ", d.right,
                        " on ", me));
  return str(" (the keys that differ: ", dtrain::join(parts, ", "), differences.size() >= 8 ? ", ..." : "", ")");
}

}  // namespace

void ClusterSession::compare_job_descriptions(const std::vector<std::pair<std::string, std::string>>& agreement,
                                              const std::string& document) {
  // (a document too large for one store frame is left out: the hashes still differ)
  const bool publish = !document.empty() && document.size() <= kMaxFrameBytes / 2;
  if (publish) store_->set("agree_doc/" + cluster_.task.str(), document);
  // The cluster may come from TF_CONFIG rather than the file: compare it too.
  std::string cluster;
  for (const auto& t : cluster_.spec.all_tasks()) cluster += t.str() + "=" + cluster_.spec.address(t) + ",";
  std::string mine;
  for (const auto& [name, value] : agreement) mine += str(name, "=", value, ";");
  mine += str("cluster_sha256=", sha256_hex(cluster).substr(0, 16), ";dtrain_version=", DTRAIN_VERSION,
              ";world_size=", world_size());
  store_->set("agree/" + cluster_.task.str(), mine);
  const auto tasks = cluster_.spec.all_tasks();
  if (!store_->wait(keys_for("agree/", tasks), rendezvous_timeout_))
    throw TimeoutError("rendezvous: the other tasks did not report their job description in time");
  const auto my_fields = parse_fields(mine);
  std::vector<std::string> differences;
  for (const auto& t : tasks) {
    if (t == cluster_.task) continue;
    const auto theirs = parse_fields(store_->get("agree/" + t.str()).value_or(""));
    for (const auto& [name, value] : my_fields) {
      auto it = theirs.find(name);
      const std::string other = it == theirs.end() ? "(missing)" : it->second;
      if (other == value) continue;
      std::string keys;
      if (publish && !agreement.empty() && name == agreement.front().first)
        keys = document_differences(store_->get("agree_doc/" + t.str()).value_or(""), document, t.str(),
                                    cluster_.task.str());
      differences.push_back(str(t.str(), " has ", name, " ", other, " where ", cluster_.task.str(), " has ", value, keys));
    }
  }
  if (!differences.empty()) {
    // Every other task sees a difference too. Wait (briefly) until each has read the
    // descriptions before failing the job, so each reports the mismatch itself instead
    // of seeing the chief fail the job, or vanish, under it (exit code 4, not 2).
    try {
      store_->set("compared/" + cluster_.task.str(), "1");
      store_->wait(keys_for("compared/", tasks), std::min(rendezvous_timeout_, 10.0));
    } catch (const Error&) {
      // A task was lost meanwhile: the mismatch is still the cause to report.
    }
    const std::string message =
        str("the tasks of this job disagree: ", dtrain::join(differences, "; "),
            ". Every task must run the same job file and dtrain version (only `task` and runtime.threads may differ)");
    throw ConfigError(message);
  }
}

namespace {
int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void ClusterSession::report_step(int64_t step) {
  step_.store(step);
  if (now_ms() - last_sent_ms_.load() < 100) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    step_pending_ = true;
  }
  stop_cv_.notify_all();
}

void ClusterSession::heartbeat_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    step_pending_ = false;
    lock.unlock();
    last_sent_ms_.store(now_ms());
    std::optional<std::string> failure;
    try {
      const HeartbeatReply reply = control_->heartbeat(step_.load());
      failure = reply.failure;
      chief_step_ = reply.chief_step;
    } catch (const Error& e) {
      const config::TaskId chief = cluster_.spec.chief();
      const std::string when = chief_step_ < 0 ? std::string("before reporting any step")
                                               : str("after step ", chief_step_);
      failure = str("the chief ", describe(chief), " was lost ", when, ": ", e.what());
    }
    lock.lock();
    if (failure) {
      if (!failure_) failure_ = *failure;
      if (on_failure_) on_failure_(*failure_);
      stop_cv_.notify_all();  // wakes wait_for_failure()
      return;
    }
    stop_cv_.wait_for(lock, std::chrono::duration<double>(heartbeat_interval_),
                      [this] { return stop_ || step_pending_; });
  }
}

void ClusterSession::on_failure(std::function<void(const std::string&)> callback) {
  std::lock_guard<std::mutex> lock(mutex_);
  on_failure_ = std::move(callback);
}

void ClusterSession::check_health() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_) throw PeerLost(*failure_);
}

std::optional<std::string> ClusterSession::wait_for_failure(double seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  stop_cv_.wait_for(lock, std::chrono::duration<double>(std::max(seconds, 0.0)), [this] { return failure_.has_value(); });
  return failure_;
}

void ClusterSession::fail(const std::string& message) {
  finished_ = true;  // the destructor need not report again
  try {
    store_->fail(message);
  } catch (const std::exception&) {
    // The chief may be gone; the others will notice that on their own.
  }
}

void ClusterSession::finish() {
  std::vector<config::TaskId> essential, expendable;
  for (const auto& t : cluster_.spec.all_tasks()) (expendable_.count(t.str()) ? expendable : essential).push_back(t);
  store_->set("finish/" + cluster_.task.str(), "1");
  // No overall deadline: the wait ends early with PeerLost if any task is lost
  // (the chief fails pending waits), and heartbeats detect a lost chief.
  Stopwatch waited;
  const auto through = [&](const config::TaskId& t) {
    return store_->get("finish/" + t.str()) || store_->get("status/" + t.str()).value_or("") == "lost";
  };
  while (true) {
    if (store_->wait(keys_for("finish/", essential), expendable.empty() ? 5.0 : 0.2) &&
        std::all_of(expendable.begin(), expendable.end(), through))
      break;
    check_health();
    if (waited.seconds() > 60.0) {
      log::info("rendezvous: waiting for the other tasks to finish");
      waited.reset();
    }
  }
  stop_heartbeats();
  control_->done();
  finished_ = true;
  if (server_ && !server_->wait_all_done(10.0))
    log::warn("rendezvous: some tasks did not sign off within 10 s after the final barrier");
}

}  // namespace dtrain::rendezvous
