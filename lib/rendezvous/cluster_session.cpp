// Implementation of cluster_session.h.
//
// Store keys (one store per job): join/<task> ("<machine>\n<description>\n<job
// document>"), roster (the chief's), rendezvous/waiting (the chief's account
// of who is missing), compared and compared/all (only when the descriptions
// differ), finish/<task>, finish/count and finish/all.
#include "rendezvous/cluster_session.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <sstream>

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

// "worker:3 at h:1, worker:9 at h:2, ... and 41 more": a list that stays readable at 4,096 tasks.
std::string some_of(const std::vector<std::string>& names, size_t shown = 8) {
  if (names.size() <= shown) return dtrain::join(names, ", ");
  const std::vector<std::string> first(names.begin(), names.begin() + static_cast<long>(shown));
  return str(dtrain::join(first, ", "), " and ", names.size() - shown, " more");
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

std::string cluster_digest(const config::ClusterSpec& cluster) {
  std::string text;
  for (const auto& t : cluster.all_tasks()) text += t.str() + "=" + cluster.address(t) + ",";
  return sha256_hex(text).substr(0, 16);
}

ClusterSession::ClusterSession(SessionSpec spec)
    : cluster_(std::move(spec.cluster)),
      credentials_(spec.credentials),
      heartbeat_interval_(spec.heartbeat_interval),
      rendezvous_timeout_(spec.rendezvous_timeout),
      expendable_(spec.expendable),
      agreement_(spec.agreement),
      agreement_document_(spec.agreement_document),
      // (a document too large for one store frame is left out: the hashes still differ)
      publish_document_(!spec.agreement_document.empty() && spec.agreement_document.size() <= kMaxFrameBytes / 2),
      cluster_digest_(spec.cluster_digest.empty() ? cluster_digest(cluster_.spec) : spec.cluster_digest),
      min_training_tasks_(spec.min_training_tasks),
      settle_seconds_(spec.settle_seconds) {
  Stopwatch& timer = started_;
  const config::TaskId chief = cluster_.spec.chief();
  const config::HostPort chief_address = config::parse_host_port(cluster_.spec.address(chief), "the chief's address");
  if (is_chief()) {
    ServerOptions so;
    so.credentials = credentials_;
    so.heartbeat_timeout = spec.heartbeat_timeout;
    so.chief = chief.str();
    so.expendable = spec.expendable;
    so.stall_timeout = spec.stall_timeout;
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
  client_options_ = co;
  // The store connection first (its proof goes out with the join: one round
  // trip fewer), then the control connection on the heartbeat thread (its
  // welcome says this task's incarnation) while this thread joins. (Both at
  // once was faster at 8 tasks and slower at 4,096, where the barrier waits for
  // CPU and twice the connections in flight cost more.)
  ClientOptions control = co;
  control.role = "control";
  control.request_timeout = spec.heartbeat_timeout;
  control.cancelled = [this] { return stopping(); };
  try {
    ClientOptions store_options = co;
    store_options.prove_with_first_request = true;
    store_ = std::make_unique<StoreClient>(host, chief_address.port, store_options);
    heartbeat_thread_ = std::thread([this, host, port = chief_address.port, control] {
      heartbeat_loop(host, port, control);
    });
    join_and_agree();
    wait_for_control();
  } catch (const Error& e) {
    // The destructor will not run: stop the heartbeats and tell the others why.
    stop_heartbeats();
    if (store_ && !dynamic_cast<const PeerLost*>(&e)) fail(str(cluster_.task.str(), ": ", e.what()));
    throw;
  } catch (...) {
    stop_heartbeats();  // a running thread left joinable would end the process
    throw;
  }
  join_seconds_ = timer.seconds();
  const size_t tasks = cluster_.spec.all_tasks().size();
  if (absent_at_start_.empty())
    log::info("rendezvous: all ", tasks, " tasks joined and agree (job ", credentials_.job_id, ", ",
              format_seconds(join_seconds_), ")");
  else
    log::info("rendezvous: ", tasks - absent_at_start_.size(), " of ", tasks, " tasks joined and agree (job ",
              credentials_.job_id, ", ", format_seconds(join_seconds_), "); the job starts without ",
              some_of(absent_at_start_), " (strategy.elastic: they join the running job when they come)");
}

int ClusterSession::tasks_on_this_host() const {
  const auto& all = hosts();
  const std::string& mine = all.at(cluster_.task.str());
  return static_cast<int>(std::count_if(all.begin(), all.end(), [&](const auto& h) { return h.second == mine; }));
}

void ClusterSession::stop_heartbeats() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (doctor_thread_.joinable()) doctor_thread_.join();
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

// A task's join value: "<machine>\n<description>\n<job document>".
struct JoinValue {
  std::string host, description, document;
};

// The chief's roster (parse_roster): the machines, the tasks' machines as runs
// of (machine index, task count) in all_tasks() order, the chief's description,
// and what differs ("" when the tasks agree).
struct Roster {
  std::vector<std::string> machines;
  std::vector<std::pair<size_t, size_t>> runs;
  std::string chief_description;
  std::string disagreement;
};

std::string encode_join(const JoinValue& v) { return v.host + "\n" + v.description + "\n" + v.document; }

JoinValue decode_join(const std::string& value) {
  JoinValue v;
  const size_t first = value.find('\n');
  v.host = value.substr(0, first);
  if (first == std::string::npos) return v;
  const size_t second = value.find('\n', first + 1);
  v.description = value.substr(first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
  if (second != std::string::npos) v.document = value.substr(second + 1);
  return v;
}

// "<M>\n<machine 0>\n...<machine M-1>\n<runs: index*count ...>\n<chief's description>[\ndisagree:...]"
Roster parse_roster(const std::string& text, size_t tasks) {
  const auto malformed = [] {
    return RuntimeError("rendezvous: the chief's roster of the tasks is malformed; are all tasks running the same "
                        "dtrain version?");
  };
  Roster roster;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  if (line.empty() || !all_digits(line) || line.size() > 9) throw malformed();
  roster.machines.resize(std::stoul(line));
  for (auto& m : roster.machines)
    if (!std::getline(in, m)) throw malformed();
  std::getline(in, line);
  std::istringstream runs(line);
  size_t covered = 0;
  for (std::string run; runs >> run;) {
    const size_t star = run.find('*');
    const std::string index = run.substr(0, star), count = star == std::string::npos ? "" : run.substr(star + 1);
    if (index.empty() || count.empty() || !all_digits(index) || !all_digits(count) || index.size() > 9 ||
        count.size() > 9 || std::stoul(index) >= roster.machines.size())
      throw malformed();
    roster.runs.push_back({std::stoul(index), std::stoul(count)});
    covered += roster.runs.back().second;
  }
  if (covered != tasks || !std::getline(in, roster.chief_description)) throw malformed();
  if (std::getline(in, line) && line.rfind("disagree:", 0) == 0) roster.disagreement = line.substr(9);
  return roster;
}

}  // namespace

// "config_sha256=...;cluster_sha256=...;dtrain_version=...;world_size=N".
std::string ClusterSession::description() const {
  std::string mine;
  for (const auto& [name, value] : agreement_) mine += str(name, "=", value, ";");
  // The cluster may come from TF_CONFIG rather than the file: compare it too.
  return mine + str("cluster_sha256=", cluster_digest_, ";dtrain_version=", DTRAIN_VERSION, ";world_size=", world_size());
}

// What differs between task `them`'s join value and mine, one sentence per
// field, with the keys of the job config that differ.
std::vector<std::string> ClusterSession::differences(const std::string& them, const std::string& their_value,
                                                     const std::string& mine) const {
  const std::string& me = cluster_.task.str();
  const JoinValue theirs = decode_join(their_value);
  std::vector<std::string> out;
  const auto their_fields = parse_fields(theirs.description);
  for (const auto& [name, value] : parse_fields(mine)) {
    auto it = their_fields.find(name);
    const std::string other = it == their_fields.end() ? "(missing)" : it->second;
    if (other == value) continue;
    std::string keys;
    if (publish_document_ && !agreement_.empty() && name == agreement_.front().first)
      keys = document_differences(theirs.document, agreement_document_, them, me);
    out.push_back(str(them, " has ", name, " ", other, " where ", me, " has ", value, keys));
  }
  return out;
}

// Joins and agrees, in O(1) requests per task and O(N) for the chief:
//   every task   sets join/<task>: its machine, its description, its job document;
//   the chief    in the same write, waits for every join key (wait_get: the reply
//                carries the values when they fit in one frame, else a few
//                get_many requests read them), and sets `roster`: the tasks'
//                machines, its own description and, when descriptions differ,
//                what differs;
//   the others   in the same write, wait for `roster` and get it (and the chief's
//                join value, only when their description differs from the chief's).
// A task's first write also carries its proof of the job secret: two round trips
// to the barrier after the hello. (Before, every task read every other's keys:
// N^2 requests, 535,102 at 512 tasks.)
void ClusterSession::join_and_agree() {
  const std::string me = cluster_.task.str();
  const std::string mine = description();
  const std::string join_value = encode_join({host_identity(), mine, publish_document_ ? agreement_document_ : ""});
  std::vector<std::string> problems;
  if (is_chief()) {
    roster_ = make_roster(mine, join_value);
  } else {
    roster_ = wait_for_roster(join_value);
  }
  const Roster roster = parse_roster(roster_, cluster_.spec.all_tasks().size());
  if (!is_chief() && roster.chief_description != mine) {
    // The chief's description against mine, in my words (a task that rejoins a
    // running job is checked here: the roster is from the first rendezvous).
    const std::string chief = cluster_.spec.chief().str();
    problems = differences(chief, store_->get("join/" + chief).value_or(""), mine);
  }
  if (problems.empty() && !roster.disagreement.empty()) problems.push_back(roster.disagreement);
  if (problems.empty()) return;
  // The chief's roster holds no disagreement, but this task differs from it:
  // it joins a running job (the others compared long ago). Its error is its own.
  if (roster.disagreement.empty())
    throw ConfigError(str("the tasks of this job disagree: ", dtrain::join(problems, "; "),
                          ". A task that joins a running job must run its job file and dtrain version (only `task` "
                          "and runtime.threads may differ)"));
  // Every task sees a difference. Wait (briefly) until each has read the roster
  // before failing the job, so each reports the mismatch itself instead of seeing
  // the chief fail the job, or vanish, under it (exit code 4, not 2).
  try {
    if (store_->add("compared", 1) == static_cast<int64_t>(cluster_.spec.all_tasks().size()))
      store_->set("compared/all", "1");
    store_->wait({"compared/all"}, std::min(rendezvous_timeout_, 10.0));
  } catch (const Error&) {
    // A task was lost meanwhile: the mismatch is still the cause to report.
  }
  throw ConfigError(str("the tasks of this job disagree: ", dtrain::join(problems, "; "),
                        ". Every task must run the same job file and dtrain version (only `task` and runtime.threads "
                        "may differ)"));
}

// Waits of at most 5 s (then says who is missing), none past rendezvous_timeout;
// the deadline counts from the session's start (connecting to the chief included).
double ClusterSession::next_wait() const {
  return std::clamp(rendezvous_timeout_ - started_.seconds(), 0.0, 5.0);
}

std::vector<std::string> ClusterSession::missing_tasks(const std::vector<std::optional<std::string>>& values,
                                                       std::vector<std::string>* joined) const {
  const auto tasks = cluster_.spec.all_tasks();
  std::vector<std::string> missing;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!values[i]) missing.push_back(describe(tasks[i]));
    if (values[i] && joined) joined->push_back(tasks[i].str());
  }
  return missing;
}

bool ClusterSession::may_start_without(const std::vector<std::optional<std::string>>& values) const {
  if (min_training_tasks_ <= 0) return false;
  const auto tasks = cluster_.spec.all_tasks();
  int training = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const bool trains = cluster_.spec.rank(tasks[i]) >= 0;
    if (!values[i] && !trains) return false;  // only training tasks may be missing
    if (values[i] && trains) ++training;
  }
  return training >= min_training_tasks_;
}

std::vector<std::string> ClusterSession::wait_for_joins(const std::vector<std::string>& keys,
                                                        const std::string& join_value) {
  const auto tasks = cluster_.spec.all_tasks();
  // An elastic job's chief looks often (it counts who is there); others wait
  // for all, saying every 5 s who is missing.
  const bool elastic = min_training_tasks_ > 0;
  const auto wait = [&] { return elastic ? std::min(next_wait(), 0.25) : next_wait(); };
  // Its own join value and the wait for every task's, in one round trip; the
  // reply carries the values when they fit in one frame (else: get_many).
  auto values = store_->set_then_wait_get("join/" + cluster_.task.str(), join_value, keys, wait());
  std::optional<Stopwatch> enough;  // since min_training_tasks had joined
  std::optional<Stopwatch> said;    // since the last "waiting for" line
  while (!values) {
    const std::vector<std::optional<std::string>> found = store_->get_many(keys);
    if (may_start_without(found)) {
      if (!enough) {
        enough.emplace();
        log::info("rendezvous: ", min_training_tasks_, " training tasks joined (strategy.elastic.min_workers); ",
                  "the job starts in ", settle_seconds_, " s (strategy.elastic.settle_seconds) unless all come first");
      }
      if (enough->seconds() >= settle_seconds_) {
        std::vector<std::string> out;
        for (size_t i = 0; i < tasks.size(); ++i) {
          out.push_back(found[i].value_or(""));
          if (!found[i]) absent_at_start_.push_back(tasks[i].str());
        }
        return out;
      }
    }
    std::vector<std::string> joined;
    const std::vector<std::string> missing = missing_tasks(found, &joined);
    // Connections that claimed a missing task but failed the proof changed
    // nothing; said here, they tell a user who mistyped a secret what happened.
    const auto failed_text = [&] {
      std::vector<std::string> names;
      for (size_t i = 0; i < tasks.size(); ++i)
        if (!found[i]) names.push_back(tasks[i].str());
      const std::string failed = server_->failed_proofs(names);
      return failed.empty() ? "" : str("; failed proofs of the job secret from connections claiming them: ", failed,
                                       " (another DTRAIN_JOB_SECRET?)");
    };
    if (started_.seconds() >= rendezvous_timeout_)
      throw TimeoutError(str("rendezvous: after ", rendezvous_timeout_, " s these tasks have not joined: ",
                             dtrain::join(missing, ", "), failed_text(),
                             "; start them (same job file and secret) or raise runtime.rendezvous_timeout"));
    if (!said || said->seconds() >= 5.0) {
      const std::string waiting = str(some_of(missing), " (", joined.size(), " of ", tasks.size(), " joined: ",
                                      some_of(joined), ")", failed_text());
      store_->set("rendezvous/waiting", waiting);
      log::info("rendezvous: waiting for ", waiting);
      said.emplace();
    }
    check_health();
    values = store_->wait_get(keys, enough ? std::min(wait(), std::max(0.0, settle_seconds_ - enough->seconds())) : wait());
  }
  return *values;
}

std::string ClusterSession::make_roster(const std::string& mine, const std::string& join_value) {
  const auto tasks = cluster_.spec.all_tasks();
  const std::string me = cluster_.task.str();
  const std::vector<std::string> values = wait_for_joins(keys_for("join/", tasks), join_value);
  // Every task's machine (as an index into a list of machines, in runs, so that
  // the roster stays small: 4,096 tasks on 512 machines of 8 are 512 runs), the
  // chief's own description, and every description that differs from it.
  std::map<std::string, size_t> machine_index;
  std::string machines, runs;
  size_t run_index = 0, run_length = 0;
  const auto end_run = [&] {
    if (run_length > 0) runs += str(runs.empty() ? "" : " ", run_index, "*", run_length);
  };
  std::vector<std::string> problems;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto& t = tasks[i];
    const std::string& value = values[i];
    const JoinValue joined = decode_join(value);  // (an absent task's: "", on machine "" until it joins)
    auto [it, added] = machine_index.emplace(joined.host, machine_index.size());
    if (added) machines += joined.host + "\n";
    if (run_length == 0 || it->second != run_index) {
      end_run();
      run_index = it->second;
      run_length = 0;
    }
    ++run_length;
    if (t.str() != me && !value.empty() && joined.description != mine)
      for (auto& p : differences(t.str(), value, mine)) problems.push_back(std::move(p));
  }
  end_run();
  std::string roster = str(machine_index.size(), "\n", machines, runs, "\n", mine);
  // (a roster must fit one store frame: at most 16 of the differences)
  if (problems.size() > 16) {
    const size_t more = problems.size() - 16;
    problems.resize(16);
    problems.push_back(str("and ", more, " more difference(s)"));
  }
  if (!problems.empty()) roster += "\ndisagree:" + dtrain::join(problems, "; ");
  // The first membership without the absent (before the roster: who reads the
  // roster finds it).
  if (!absent_at_start_.empty()) server_->start_membership(absent_at_start_);
  store_->set("roster", roster);
  return roster;
}

std::string ClusterSession::wait_for_roster(const std::string& join_value) {
  const std::string me = cluster_.task.str();
  // The join value and the first wait in one round trip, then waits of their own.
  auto roster = store_->set_then_wait_get("join/" + me, join_value, {"roster"}, next_wait());
  while (!roster) {
    if (started_.seconds() >= rendezvous_timeout_)
      throw TimeoutError(str("rendezvous: after ", rendezvous_timeout_, " s these tasks have not joined: ",
                             some_of(missing_tasks(store_->get_many(keys_for("join/", cluster_.spec.all_tasks())), nullptr), 32),
                             "; start them (same job file) or raise runtime.rendezvous_timeout"));
    const auto waiting = store_->get("rendezvous/waiting");
    log::info("rendezvous: waiting for ", waiting.value_or("the chief to see every task join"));
    check_health();
    roster = store_->wait_get({"roster"}, next_wait());
  }
  return roster->front();
}

const std::map<std::string, std::string>& ClusterSession::hosts() const {
  if (hosts_.empty()) read_roster();
  learn_unknown_hosts();
  return hosts_;
}

void ClusterSession::learn_unknown_hosts() const {
  std::vector<std::string> unknown;
  for (const auto& [task, host] : hosts_)
    if (host.empty()) unknown.push_back(task);
  if (unknown.empty()) return;
  std::vector<std::string> keys;
  for (const auto& task : unknown) keys.push_back("join/" + task);
  const auto values = store_->get_many(keys);
  for (size_t i = 0; i < unknown.size(); ++i)
    if (values[i]) hosts_[unknown[i]] = decode_join(*values[i]).host;
}

void ClusterSession::read_roster() const {
  const Roster roster = parse_roster(roster_, cluster_.spec.all_tasks().size());
  const auto tasks = cluster_.spec.all_tasks();
  size_t next = 0;
  for (const auto& [index, count] : roster.runs)
    for (size_t i = 0; i < count; ++i) hosts_[tasks[next++].str()] = roster.machines[index];
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

void ClusterSession::beat_soon() {
  if (now_ms() - last_sent_ms_.load() < 50) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    step_pending_ = true;
  }
  stop_cv_.notify_all();
}

bool ClusterSession::stopping() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_;
}

// The control connection, then the heartbeats on it.
void ClusterSession::heartbeat_loop(const std::string& host, int port, const ClientOptions& options) {
  try {
    auto control = std::make_unique<StoreClient>(host, port, options);
    std::lock_guard<std::mutex> lock(mutex_);
    control_ = std::move(control);
  } catch (...) {  // any exception: one escaping this thread would end the process
    std::lock_guard<std::mutex> lock(mutex_);
    control_error_ = std::current_exception();
  }
  stop_cv_.notify_all();
  if (control_error_) return;  // (this thread's own write)
  std::unique_lock<std::mutex> lock(mutex_);
  // The first heartbeat goes one interval after the control connection came up
  // (which the server counts as one): at 4,096 tasks joining at once, a beat
  // each right away was a fifth of the rendezvous' requests.
  stop_cv_.wait_for(lock, std::chrono::duration<double>(heartbeat_interval_), [this] { return stop_ || step_pending_; });
  while (!stop_) {
    step_pending_ = false;
    lock.unlock();
    last_sent_ms_.store(now_ms());
    std::optional<std::string> failure;
    try {
      const HeartbeatReply reply = control_->heartbeat(step_.load());
      failure = reply.failure;
      chief_step_ = reply.chief_step;
      membership_.store(reply.membership);
      if (!failure) handle_reports(reply.report_generation);
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

namespace {
std::atomic<bool> report_signalled{false};
}  // namespace

void ClusterSession::request_report_from_signal() { report_signalled.store(true); }

void ClusterSession::request_report(const std::string& reason, bool once_per_job) {
  std::lock_guard<std::mutex> lock(mutex_);
  report_reason_ = reason;
  report_once_ = once_per_job;
  step_pending_ = true;  // wakes the heartbeat thread now
  stop_cv_.notify_all();
}

namespace {
// A new report generation in the job's store, saying why: every task's next
// heartbeat reply carries it (the server's own request_report does the same).
int64_t count_report_generation(Store& store, const std::string& reason) {
  const int64_t generation = store.add("report/generation", 1);
  store.set(str("report/reason/", generation), reason);
  return generation;
}
}  // namespace

void ask_for_report(const config::ClusterSpec& cluster, const Credentials& credentials, const std::string& reason) {
  const config::TaskId chief = cluster.chief();
  const config::HostPort address = config::parse_host_port(cluster.address(chief), "the chief's address");
  ClientOptions co;
  co.credentials = credentials;
  co.task = chief.str();
  co.server_name = str("the chief (", chief.str(), " at ", cluster.address(chief), ")");
  co.connect_timeout = 10.0;
  StoreClient store(address.host, address.port, co);
  count_report_generation(store, reason);
}

void ClusterSession::set_report_source(std::function<std::string()> source) {
  std::lock_guard<std::mutex> lock(mutex_);
  report_source_ = std::move(source);
}

void ClusterSession::on_reports(std::function<void(const std::string&, const Reports&)> handler) {
  std::lock_guard<std::mutex> lock(mutex_);
  report_handler_ = std::move(handler);
  if (is_chief() && !doctor_thread_.joinable()) doctor_thread_ = std::thread([this] { doctor_loop(); });
}

// On the heartbeat thread: asks for a report if this process was told to, and
// publishes this task's for every generation it has not answered yet.
void ClusterSession::handle_reports(int64_t generation) {
  std::optional<std::string> reason;
  std::function<std::string()> source;
  bool once = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(reason, report_reason_);
    std::swap(once, report_once_);
    source = report_source_;
  }
  if (once && reason && control_->add("report/fault_asked", 1) > 1) reason.reset();  // another task asked first
  if (report_signalled.exchange(false)) reason = str("asked for with SIGUSR1 (to ", cluster_.task.str(), ")");
  if (reason) generation = count_report_generation(*control_, *reason);
  if (generation <= reports_seen_) return;
  // Several tasks may ask at once (each that finds the tasks disagreeing on a
  // collective does): the chief collects one generation, perhaps not the newest
  // this task sees, so the same report answers every generation not answered yet.
  const std::string report = source ? source() : str("step\t", step_.load(), "\n");
  for (int64_t g = std::max(reports_seen_ + 1, generation - 7); g <= generation; ++g)
    control_->set(str("report/", g, "/", cluster_.task.str()), report);
  reports_seen_ = generation;
  if (is_chief()) {
    std::lock_guard<std::mutex> lock(mutex_);
    reports_to_collect_ = generation;
    stop_cv_.notify_all();
  }
}

// The chief's: for each generation, every task's report (waiting up to 5 s for
// them), then the handler. A connection of its own: the main thread may be the
// one that hangs.
void ClusterSession::doctor_loop() {
  int64_t collected = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    stop_cv_.wait(lock, [&] { return stop_ || reports_to_collect_ > collected; });
    if (stop_) return;
    const int64_t generation = reports_to_collect_;
    const auto handler = report_handler_;
    lock.unlock();
    try {
      if (!doctor_store_) {
        const config::HostPort chief = config::parse_host_port(cluster_.spec.address(cluster_.task), "the chief's address");
        doctor_store_ = std::make_unique<StoreClient>("127.0.0.1", chief.port, client_options_);
      }
      std::vector<std::string> keys;
      const auto tasks = cluster_.spec.all_tasks();
      for (const auto& t : tasks) keys.push_back(str("report/", generation, "/", t.str()));
      doctor_store_->wait(keys, 5.0);
      keys.push_back(str("report/reason/", generation));
      const auto values = doctor_store_->get_many(keys);
      Reports reports;
      for (size_t i = 0; i < tasks.size(); ++i) reports[tasks[i].str()] = values[i].value_or("");
      if (handler) handler(values.back().value_or("asked for"), reports);
    } catch (const std::exception& e) {
      log::warn("rendezvous: could not collect the tasks' reports: ", e.what());
    }
    collected = generation;
    lock.lock();
  }
}

// Waits for the heartbeat thread's control connection (it is up, or failed, within
// the rendezvous deadline: its connect has the same one), and takes its incarnation.
void ClusterSession::wait_for_control() {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool decided = stop_cv_.wait_for(lock, std::chrono::duration<double>(rendezvous_timeout_ + 30.0),
                                         [this] { return control_ || control_error_; });
  if (control_error_) std::rethrow_exception(control_error_);
  if (!decided)
    throw TimeoutError(str("rendezvous: the control connection to the chief did not come up within ",
                           rendezvous_timeout_ + 30.0, " s"));
  incarnation_ = control_->incarnation();
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

void ClusterSession::sever() {
  stop_heartbeats();
  control_->sever();
  store_->sever();
  finished_ = true;  // nothing more to say: the destructor stays silent
}

void ClusterSession::finish() {
  std::vector<config::TaskId> essential, expendable;
  for (const auto& t : cluster_.spec.all_tasks()) (expendable_.count(t.str()) ? expendable : essential).push_back(t);
  const std::string me = cluster_.task.str();
  store_->set("finish/" + me, "1");
  // The essential tasks count themselves in; the last one opens the barrier (one
  // key to wait for, not one per task).
  if (!expendable_.count(me) && store_->add("finish/count", 1) == static_cast<int64_t>(essential.size()))
    store_->set("finish/all", "1");
  // No overall deadline: the wait ends early with PeerLost if any task is lost
  // (the chief fails pending waits), and heartbeats detect a lost chief.
  Stopwatch waited;
  const auto through = [&](const config::TaskId& t) {
    if (store_->get("finish/" + t.str())) return true;
    const std::string status = store_->get("status/" + t.str()).value_or("");
    return status == "lost" || status == "absent";  // (absent: an elastic job started without it, and it never came)
  };
  while (true) {
    if (store_->wait({"finish/all"}, expendable.empty() ? 5.0 : 0.2)) {
      std::vector<std::string> pending;  // (finish/all is there: wait for these, not again for it)
      for (const config::TaskId& t : expendable)
        if (!through(t)) pending.push_back("finish/" + t.str());
      if (pending.empty()) break;
      store_->wait(pending, 0.2);  // (bounded: a task lost meanwhile never finishes, its status says so)
    }
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
