// Implementation of store_server.h on standalone Asio.
//
// One io_context runs on one thread, so the store, the waiters and the task table
// need no locks. Each Connection reads one request, handles it, writes one reply,
// then reads the next; a `wait` request parks the connection until its keys exist,
// its deadline passes, or the job fails.
#include "rendezvous/store_server.h"

#include <asio.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <future>
#include <optional>
#include <set>
#include <unordered_map>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "core/trace.h"
#include "rendezvous/asio_transport.h"
#include "rendezvous/wire.h"

namespace dtrain::rendezvous {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

struct TaskState {
  std::string address;
  bool seen = false;       // its control connection came up at some point
  bool connected = false;  // its control connection is up
  bool done = false;       // said it is finishing normally
  bool informed = false;   // a reply told it that the job failed
  bool absent = false;     // an elastic job started without it (StoreServer::start_membership)
  int64_t last_step = -1;
  Clock::time_point last_heartbeat;
};

// Whether `task` trains (chief or worker; not an evaluator, not a ps task).
bool is_training_task(const std::string& task) {
  return task.rfind("worker:", 0) == 0 || task.rfind("chief:", 0) == 0;
}

// "after step 37", or "before reporting any step" (heartbeats carry the step, so
// it can lag the task's true progress by up to one heartbeat interval).
std::string step_text(int64_t step) {
  return step < 0 ? std::string("before reporting any step") : str("after step ", step);
}

}  // namespace

class Connection;

struct ServerState {
  explicit ServerState(ServerOptions o) : options(std::move(o)), sweep_timer(server.impl().io) {
    rules.magic = kProtocolMagic;
    rules.credentials = options.credentials;
    rules.timeout_seconds = options.handshake_timeout;
    rules.max_frame_bytes = kMaxFrameBytes;
    rules.log_prefix = "rendezvous";
    server.set_log_prefix(rules.log_prefix);
    for (const auto& t : options.tasks) {
      tasks[t.name].address = t.address;
      if (is_training_task(t.name)) members.insert(t.name);
    }
  }

  // First, so it goes last: ~StoreServer stops its I/O thread before anything goes.
  AsioServer server;
  ServerOptions options;
  HandshakeRules rules;
  asio::steady_timer sweep_timer;

  // Touched only on the I/O thread:
  std::map<std::string, std::string> kv;
  std::map<std::string, TaskState> tasks;
  std::optional<std::string> failure;
  // A parked `wait`: its keys, how many of them are still absent, and who to answer.
  struct Waiter {
    std::vector<std::string> keys;
    size_t missing = 0;
    std::shared_ptr<Connection> connection;
    Clock::time_point deadline;
    bool with_values = false;  // a wait_get: the reply carries the keys' values
  };
  using WaiterList = std::list<Waiter>;
  WaiterList waiters;
  // Each absent key a waiter waits for -> those waiters. Setting a key touches
  // only its own waiters, so N tasks waiting on N keys each cost O(N) per key,
  // not a scan of every waiter's every key (which at 4,096 tasks was 16M
  // lookups per set).
  std::unordered_map<std::string, std::vector<WaiterList::iterator>> waiting_on;
  std::atomic<int64_t> requests{0};  // read by requests_served() from other threads
  Clock::time_point last_progress = Clock::now();  // when a task's step last changed
  bool stall_reported = false;                     // this stall's report was asked for

  // For wait_all_done(), read from other threads:
  std::mutex done_mutex;
  std::condition_variable done_cv;
  bool all_done = false;

  void start();
  void sweep();
  // The job fails with `why` (the first failure only).
  void fail_job(const std::string& why);
  // A task is gone (`why`): the job fails, unless the task is expendable.
  void task_lost(const std::string& task, const std::string& why);
  // `members` changed (a training task was lost, or asked to train again):
  // the membership's next generation, membership/generation, and who trains in
  // it, membership/<generation> ("chief:0,worker:1,...").
  void membership_changed();
  std::set<std::string> members;  // the training tasks that train now
  // Sets `key` (a new key wakes the waits that need it).
  void put(const std::string& key, std::string value);
  // `key` was just created: answers the waits that lacked only it.
  void created(const std::string& key);
  // Parks a wait for `keys` (answered at once when all exist); `with_values`: a wait_get.
  void park(std::vector<std::string> keys, const std::shared_ptr<Connection>& connection, Clock::time_point deadline,
            bool with_values);
  // The reply to a wait whose keys all exist: kOk, with their values for a wait_get
  // when they fit in one frame.
  Message wait_done(const std::vector<std::string>& keys, bool with_values) const;
  // Takes a parked wait out of waiting_on (before it is answered otherwise).
  void unpark(WaiterList::iterator waiter);
  // Asks every task for a report of where it is (heartbeat replies carry the new
  // report/generation; report/reason/<generation> says why).
  void request_report(const std::string& reason);
  int64_t report_generation() const { return counter_after_add(value_of("report/generation"), 0).value_or(0); }
  // The value at `key`, "" when absent (without creating it: a key comes into
  // being only through put(), which wakes the waits for it).
  std::string value_of(const std::string& key) const {
    auto it = kv.find(key);
    return it == kv.end() ? std::string() : it->second;
  }
  void update_all_done();
  std::string describe(const std::string& task) const {
    auto it = tasks.find(task);
    return it == tasks.end() ? task : str(task, " (", it->second.address, ")");
  }
};

// One task's connection: the handshake (authenticated_server.h), then the
// store's requests, one frame each.
class Connection final : public AuthenticatedConnection {
 public:
  Connection(AcceptedSocket socket, ServerState* server)
      : AuthenticatedConnection(std::move(socket), server->server, server->rules), server_(server) {}

  using AuthenticatedConnection::reply;  // the server answers parked waits
  bool is_control() const { return role_ == "control"; }

 private:
  bool accept_hello(const Hello& hello) override {
    const auto& creds = server_->options.credentials;
    if (hello.job_id != creds.job_id) {
      reject(other_job_text(hello, creds),
             str("this address serves job '", creds.job_id, "', not '", printable(hello.job_id), "'"));
      return false;
    }
    if (!server_->tasks.count(hello.task)) {
      reject(str("claims to be task '", printable(hello.task), "', which is not in the cluster"));
      return false;
    }
    set_task(hello.task);
    role_ = hello.role;
    if (role_ != "control" && role_ != "store") {
      reject("asked for an unknown role");
      return false;
    }
    return true;
  }

  // A control connection: the task is up; the welcome carries its incarnation
  // (how many times its control connection came up in this job).
  int64_t on_authenticated() override {
    if (!is_control()) return 0;
    auto& t = server_->tasks[task()];
    t.seen = t.connected = true;
    t.done = false;
    t.last_heartbeat = Clock::now();
    // A client may have set the key to anything: count from 1 again then.
    const int64_t incarnation = counter_after_add(server_->value_of("incarnation/" + task()), 1).value_or(1);
    server_->put("incarnation/" + task(), std::to_string(incarnation));
    server_->put("status/" + task(), "up");
    return incarnation;
  }

  void on_ready() override { read_frame(); }

  void on_frame(const Message& m) override {
    if (const std::string why = request_problem(m); !why.empty()) return reject(why);
    auto& s = *server_;
    s.requests.fetch_add(1, std::memory_order_relaxed);
    switch (m.op) {
      case Op::kSet:
        s.put(m.fields[0], m.fields[1]);
        // A training task that came back asks to train again (an elastic job's
        // joiner, once it agreed on the job): the next membership has it.
        // (the prefix compared in place: every set of the job passes here)
        if (m.fields[0].compare(0, std::strlen(kRejoinKeyPrefix), kRejoinKeyPrefix) == 0 &&
            m.fields[0].compare(std::strlen(kRejoinKeyPrefix), std::string::npos, task()) == 0 &&
            is_training_task(task()) && !s.members.count(task())) {
          s.members.insert(task());
          s.membership_changed();
        }
        return reply({Op::kOk, 0, {}});
      case Op::kGet: {
        auto it = s.kv.find(m.fields[0]);
        if (it == s.kv.end()) return reply({Op::kNotFound, 0, {}});
        return reply({Op::kValue, 0, {it->second}});
      }
      case Op::kGetMany: {
        // As many values as fit in one frame (at least one: a value fits by itself).
        Message values{Op::kValue, 0, {}};
        size_t bytes = 64;
        for (const auto& key : m.fields) {
          auto it = s.kv.find(key);
          std::string field = it == s.kv.end() ? std::string() : "\x01" + it->second;
          bytes += field.size() + 4;
          if (!values.fields.empty() && bytes > kMaxFrameBytes) break;
          values.fields.push_back(std::move(field));
        }
        if (values.fields.empty()) return reply({Op::kValue, 0, {}});
        values.number = static_cast<int64_t>(values.fields.size());
        return reply(values);
      }
      case Op::kAdd: {
        auto it = s.kv.find(m.fields[0]);
        const std::string v = it == s.kv.end() ? std::string() : it->second;
        const std::optional<int64_t> now = counter_after_add(v, m.number);
        if (!now)
          return reply({Op::kError, 0, {str("key '", printable(m.fields[0]), "' holds '", printable(v),
                                            "', not a number that ", m.number, " can be added to")}},
                       true);
        s.put(m.fields[0], std::to_string(*now));
        return reply({Op::kValue, *now, {}});
      }
      case Op::kWait:
      case Op::kWaitGet: {
        if (s.failure) return reply({Op::kError, kJobFailed, {*s.failure}});
        const auto deadline = Clock::now() + std::chrono::milliseconds(wait_timeout_ms(m));
        return s.park(m.fields, self_as<Connection>(), deadline, m.op == Op::kWaitGet);
      }
      case Op::kHeartbeat: {
        if (!is_control()) return reject("sent a heartbeat on a store connection");
        auto& t = s.tasks[task()];
        t.last_heartbeat = Clock::now();
        if (m.number != t.last_step) {
          s.last_progress = t.last_heartbeat;
          s.stall_reported = false;
        }
        t.last_step = m.number;
        if (s.failure) {
          t.informed = true;
          s.update_all_done();
          return reply({Op::kStatus, 1, {*s.failure}});
        }
        if (!t.connected && s.value_of("status/" + task()) == "lost")
          // Declared lost (its heartbeats stopped: a cut network) and the job
          // went on without it: it must not go on alone.
          return reply({Op::kStatus, 1,
                        {str("this task (", s.describe(task()), ") was declared lost ", step_text(t.last_step),
                             " and the job went on without it; it stops here (started again, it rejoins)")}});
        auto chief = s.tasks.find(s.options.chief);
        const int64_t chief_step = chief == s.tasks.end() ? -1 : chief->second.last_step;
        // The third field: the membership's generation, the training tasks lost
        // so far (an elastic job re-forms when it grows).
        const std::string generation = s.value_of("membership/generation");
        return reply({Op::kStatus, 0,
                      {std::to_string(chief_step), std::to_string(s.report_generation()),
                       generation.empty() ? "0" : generation}});
      }
      case Op::kDone:
        if (is_control()) {
          s.tasks[task()].done = true;
          s.update_all_done();
        }
        return reply({Op::kOk, 0, {}});
      case Op::kClock:
        return reply({Op::kValue, trace::now_us(), {}});
      case Op::kFail:
        s.task_lost(task(), str("task ", s.describe(task()), " failed: ", reply_text(m, "")));
        return reply({Op::kOk, 0, {}});
      default:
        return reject(str("sent an unexpected '", op_name(m.op), "' request"));
    }
  }

  void on_closed() override {
    if (!ready()) return;
    auto& s = *server_;
    auto& t = s.tasks[task()];
    if (!is_control()) {
      // A task joins on its store connection while its control connection comes
      // up: until that one has, the store connection is what says it is alive.
      if (!t.seen && !t.done && s.kv.count("join/" + task()))
        s.task_lost(task(), str("task ", s.describe(task()), " was lost while joining: its connection closed before "
                                "its control connection came up (the process died or was killed)"));
      return;
    }
    t.connected = false;
    if (!t.done) {
      s.task_lost(task(), str("task ", s.describe(task()), " was lost ", step_text(t.last_step),
                             ": its connection closed (the process died or was killed)"));
    }
    s.update_all_done();
  }

  // Not owning: see AuthenticatedConnection's server_.
  ServerState* server_;
  std::string role_;
};

void ServerState::start() {
  // Two connections per task (store and control), and some to spare.
  raise_descriptor_limit(2 * tasks.size() + 64, str("the chief's store for ", tasks.size(), " tasks"));
  sweep();  // armed before the I/O thread runs
  // `this`, not a shared_ptr: a pending handler must not own the state that owns
  // it (see AuthenticatedConnection's server_).
  server.start([this](AcceptedSocket socket) { std::make_shared<Connection>(std::move(socket), this)->start(); });
}

// Every 100 ms: expire waits, and declare silent tasks lost.
void ServerState::sweep() {
  const auto now = Clock::now();
  const auto limit = std::chrono::duration<double>(options.heartbeat_timeout);
  for (auto& [name, t] : tasks) {
    if (t.connected && !t.done && now - t.last_heartbeat > limit) {
      t.connected = false;
      task_lost(name, str("task ", describe(name), " was lost ", step_text(t.last_step), ": no heartbeat for ",
                          options.heartbeat_timeout, " s (the process hangs or the network is cut)"));
    }
  }
  if (options.stall_timeout > 0 && !failure && !stall_reported &&
      now - last_progress > std::chrono::duration<double>(options.stall_timeout) &&
      std::any_of(tasks.begin(), tasks.end(), [](const auto& t) { return t.second.connected && t.second.last_step >= 0; })) {
    stall_reported = true;
    request_report(str("stall: no task's step has advanced for ", options.stall_timeout,
                       " s (runtime.stall_timeout) while their heartbeats still come"));
  }
  for (auto it = waiters.begin(); it != waiters.end();) {
    if (now >= it->deadline) {
      unpark(it);
      it->connection->reply({Op::kTimedOut, 0, {}});
      it = waiters.erase(it);
    } else {
      ++it;
    }
  }
  sweep_timer.expires_after(std::chrono::milliseconds(100));
  sweep_timer.async_wait([this](const std::error_code& ec) {
    if (!ec) sweep();
  });
}

void ServerState::fail_job(const std::string& why) {
  if (failure) return;  // the first failure is the cause; later ones are its effects
  failure = why;
  // This server runs in the chief, whose own error message says it next: a
  // warning here would say it twice.
  log::debug("rendezvous: the job failed: ", why);
  for (auto& w : waiters) w.connection->reply({Op::kError, kJobFailed, {why}});
  waiters.clear();
  waiting_on.clear();
  update_all_done();
}

void ServerState::task_lost(const std::string& task, const std::string& why) {
  if (!options.expendable.count(task)) return fail_job(why);
  if (value_of("status/" + task) == "lost") return;
  put("status/" + task, "lost");
  const std::string count = std::to_string(counter_after_add(value_of("lost_count"), 1).value_or(1));
  put("lost_count", count);
  put("lost/" + count, task + "#" + value_of("incarnation/" + task));
  if (members.erase(task)) membership_changed();
  log::warn("rendezvous: ", why, "; the job goes on without it (started again, it rejoins)");
  update_all_done();
}

void ServerState::membership_changed() {
  const int64_t generation = counter_after_add(value_of("membership/generation"), 1).value_or(1);
  std::vector<std::string> listed;
  for (const std::string& name : members) listed.push_back(name + "#" + value_of("incarnation/" + name));
  put(str("membership/", generation), join(listed, ","));
  put("membership/generation", std::to_string(generation));  // last: who reads it finds the list
}

void ServerState::request_report(const std::string& reason) {
  const int64_t generation = report_generation() + 1;
  put(str("report/reason/", generation), reason);
  put("report/generation", std::to_string(generation));
  log::debug("rendezvous: report ", generation, " asked for: ", reason);
}

void ServerState::put(const std::string& key, std::string value) {
  auto [it, inserted] = kv.try_emplace(key);
  it->second = std::move(value);
  if (inserted) created(key);
}

void ServerState::created(const std::string& key) {
  auto found = waiting_on.find(key);
  if (found == waiting_on.end()) return;
  const std::vector<WaiterList::iterator> lacking = std::move(found->second);
  waiting_on.erase(found);
  for (auto waiter : lacking) {
    // (a key listed twice in one wait is counted, and listed here, twice)
    if (--waiter->missing > 0) continue;
    waiter->connection->reply(wait_done(waiter->keys, waiter->with_values));
    waiters.erase(waiter);
  }
}

Message ServerState::wait_done(const std::vector<std::string>& keys, bool with_values) const {
  Message reply{Op::kOk, 0, {}};
  if (!with_values) return reply;
  size_t bytes = 64;
  for (const auto& k : keys) {
    reply.fields.push_back(value_of(k));
    bytes += reply.fields.back().size() + 4;
    if (bytes > kMaxFrameBytes) return {Op::kOk, 0, {}};
  }
  return reply;
}

void ServerState::park(std::vector<std::string> keys, const std::shared_ptr<Connection>& connection,
                       Clock::time_point deadline, bool with_values) {
  size_t missing = 0;
  for (const auto& k : keys) missing += kv.count(k) ? 0 : 1;
  if (missing == 0) return connection->reply(wait_done(keys, with_values));
  waiters.push_back({std::move(keys), missing, connection, deadline, with_values});
  const auto waiter = std::prev(waiters.end());
  for (const auto& k : waiter->keys)
    if (!kv.count(k)) waiting_on[k].push_back(waiter);
}

void ServerState::unpark(WaiterList::iterator waiter) {
  for (const auto& k : waiter->keys) {
    auto found = waiting_on.find(k);
    if (found == waiting_on.end()) continue;
    auto& list = found->second;
    list.erase(std::remove(list.begin(), list.end(), waiter), list.end());
    if (list.empty()) waiting_on.erase(found);
  }
}

void ServerState::update_all_done() {
  // A task is through when it said done, or came and went, or (once the job
  // failed) was told so or never came, or the job started without it and it
  // never came.
  bool all = true;
  for (const auto& [name, t] : tasks)
    all = all && (t.done || (t.seen && !t.connected) || (failure && (t.informed || !t.seen)) || (t.absent && !t.seen));
  std::lock_guard<std::mutex> lock(done_mutex);
  all_done = all;
  done_cv.notify_all();
}

StoreServer::StoreServer(const std::string& host, int port, ServerOptions options)
    : impl_(std::make_shared<ServerState>(std::move(options))) {
  impl_->server.listen(host, port, str("cannot listen on ", host, ":", port),
                       "; another process is listening there: stop it or give this task another port");
  impl_->start();
}

StoreServer::StoreServer(int listen_fd, ServerOptions options)
    : impl_(std::make_shared<ServerState>(std::move(options))) {
  impl_->server.adopt(listen_fd);
  impl_->start();
}

void check_can_listen(const std::string& address, const std::string& what) {
  const config::HostPort hp = config::parse_host_port(address, what);
  asio::io_context io;
  const std::optional<tcp::endpoint> endpoint = resolve_endpoint(io, hp.host, hp.port, nullptr);
  if (!endpoint) throw ConfigError(str(what, ": cannot resolve the host of ", address, "; is it this machine's name?"));
  tcp::acceptor acceptor(io);
  const std::error_code ec = bind_acceptor(acceptor, *endpoint);
  if (ec == asio::error::address_in_use)
    throw ConfigError(str(what, ": ", address, " is already in use by another process; stop it or pick another port"));
  if (ec)
    throw ConfigError(str(what, ": cannot listen on ", address, " (", ec.message(),
                          "); run this task on the machine that address names"));
}

StoreServer::~StoreServer() {
  impl_->server.stop([impl = impl_.get()] { impl->sweep_timer.cancel(); });
}

int StoreServer::port() const { return impl_->server.port(); }

int StoreServer::rejected_connections() const { return impl_->server.rejected(); }

std::string StoreServer::failed_proofs(const std::vector<std::string>& tasks) const {
  return impl_->server.failed_proofs(tasks);
}

int64_t StoreServer::requests_served() const { return impl_->requests.load(); }

double StoreServer::cpu_seconds() const { return impl_->server.thread_cpu_seconds(); }

void StoreServer::set_task_address(const std::string& task, const std::string& address) {
  asio::post(impl_->server.impl().io, [impl = impl_, task, address] { impl->tasks[task].address = address; });
}

void StoreServer::start_membership(const std::vector<std::string>& absent) {
  std::promise<void> done;
  asio::post(impl_->server.impl().io, [impl = impl_, absent, &done] {
    ServerState& s = *impl;
    for (const std::string& name : absent) {
      s.members.erase(name);
      TaskState& t = s.tasks[name];
      if (t.seen) continue;  // (it connected meanwhile: it joins as a returning task does)
      t.absent = true;
      s.put("status/" + name, "absent");
    }
    std::vector<std::string> listed;
    for (const std::string& name : s.members) listed.push_back(name + "#1");
    s.put("membership/0", join(listed, ","));
    s.update_all_done();
    done.set_value();
  });
  done.get_future().wait();
}

bool StoreServer::wait_all_done(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(impl_->done_mutex);
  return impl_->done_cv.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                                 [&] { return impl_->all_done; });
}

}  // namespace dtrain::rendezvous
