// Implementation of store_server.h on standalone Asio.
//
// One io_context runs on one thread, so the store, the waiters and the task table
// need no locks. Each Connection reads one request, handles it, writes one reply,
// then reads the next; a `wait` request parks the connection until its keys exist,
// its deadline passes, or the job fails.
#include "rendezvous/store_server.h"

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "core/trace.h"
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
  int64_t last_step = -1;
  Clock::time_point last_heartbeat;
};

// "after step 37", or "before reporting any step" (heartbeats carry the step, so
// it can lag the task's true progress by up to one heartbeat interval).
std::string step_text(int64_t step) {
  return step < 0 ? std::string("before reporting any step") : str("after step ", step);
}

}  // namespace

class Connection;

struct ServerState : std::enable_shared_from_this<ServerState> {
  explicit ServerState(ServerOptions o) : options(std::move(o)), acceptor(io), sweep_timer(io) {
    for (const auto& t : options.tasks) tasks[t.name].address = t.address;
  }

  ServerOptions options;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer sweep_timer;
  std::thread thread;
  std::atomic<int> rejected{0};

  // Touched only on the I/O thread:
  std::map<std::string, std::string> kv;
  std::map<std::string, TaskState> tasks;
  std::optional<std::string> failure;
  struct Waiter {
    std::vector<std::string> keys;
    std::shared_ptr<Connection> connection;
    Clock::time_point deadline;
  };
  std::list<Waiter> waiters;

  // For wait_all_done(), read from other threads:
  std::mutex done_mutex;
  std::condition_variable done_cv;
  bool all_done = false;

  void start();
  void accept_next();
  void sweep();
  void fail_job(const std::string& why);
  // A task is gone (`why`): the job fails, unless the task is expendable.
  void task_lost(const std::string& task, const std::string& why);
  void wake_waiters();
  void update_all_done();
  std::string describe(const std::string& task) const {
    auto it = tasks.find(task);
    return it == tasks.end() ? task : str(task, " (", it->second.address, ")");
  }
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, ServerState* server)
      : socket_(std::move(socket)), server_(server), handshake_timer_(server_->io) {
    std::error_code ec;
    const auto endpoint = socket_.remote_endpoint(ec);
    peer_ = ec ? "unknown peer" : str(endpoint.address().to_string(), ":", endpoint.port());
  }

  void start() {
    // A connection that has not authenticated in time is dropped (no slow-loris).
    handshake_timer_.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(server_->options.handshake_timeout)));
    auto self = shared_from_this();
    handshake_timer_.async_wait([self](const std::error_code& ec) {
      if (!ec && self->stage_ != Stage::kReady) self->reject("did not complete the handshake in time");
    });
    read_frame();
  }

  // Sends a reply, then reads the next request (or closes after an error reply).
  void reply(const Message& m, bool close_after = false) {
    auto self = shared_from_this();
    auto frame = std::make_shared<std::string>(encode_frame(m));
    asio::async_write(socket_, asio::buffer(*frame), [self, frame, close_after](const std::error_code& ec, size_t) {
      if (ec || close_after) return self->close();
      self->read_frame();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    std::error_code ignored;
    handshake_timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    on_closed();
  }

  bool is_control() const { return role_ == "control"; }
  const std::string& task() const { return task_; }

 private:
  enum class Stage { kHello, kProof, kReady };

  void read_frame() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(header_), [self](const std::error_code& ec, size_t) {
      // A client that hangs up after the challenge could not check the server's
      // proof: most likely a task with another secret. Say so in the chief's log.
      if (ec && self->stage_ == Stage::kProof)
        return self->reject("hung up during the handshake (does it have another job secret?)");
      if (ec) return self->close();
      const uint32_t length = decode_length(self->header_);
      if (length > kMaxFrameBytes)
        return self->reject(str("sent a frame of ", length, " bytes (limit ", kMaxFrameBytes, ")"));
      self->body_.assign(length, '\0');
      asio::async_read(self->socket_, asio::buffer(self->body_), [self](const std::error_code& ec2, size_t) {
        if (ec2) return self->close();
        Message m;
        if (!decode_payload(self->body_, m)) return self->reject("sent a malformed frame");
        self->handle(m);
      });
    });
  }

  void reject(const std::string& why) {
    if (closed_) return;
    ++server_->rejected;
    log::warn("rendezvous: dropped the connection from ", peer_, task_.empty() ? "" : " (" + task_ + ")",
              ": it ", why);
    close();
  }

  void handle(const Message& m) {
    switch (stage_) {
      case Stage::kHello: return handle_hello(m);
      case Stage::kProof: return handle_proof(m);
      case Stage::kReady: return handle_request(m);
    }
  }

  void handle_hello(const Message& m) {
    if (const std::string why = read_hello(m, kProtocolMagic, &hello_); !why.empty()) return reject(why);
    const auto& creds = server_->options.credentials;
    if (hello_.job_id != creds.job_id) {
      ++server_->rejected;
      const std::string why = other_job_text(hello_, creds);
      log::warn("rendezvous: dropped the connection from ", peer_, ": it ", why);
      return reply({Op::kError, 0, {str("this address serves job '", creds.job_id, "', not '",
                                        printable(hello_.job_id), "'")}},
                   true);
    }
    if (!server_->tasks.count(hello_.task))
      return reject(str("claims to be task '", printable(hello_.task), "', which is not in the cluster"));
    task_ = hello_.task;
    role_ = hello_.role;
    if (role_ != "control" && role_ != "store") return reject("asked for an unknown role");
    server_nonce_ = make_nonce();
    stage_ = Stage::kProof;
    reply({Op::kChallenge, 0, {server_nonce_, server_proof(creds, hello_.client_nonce, server_nonce_)}});
  }

  void handle_proof(const Message& m) {
    if (!proof_accepted(m, server_->options.credentials, hello_, server_nonce_))
      return reject("does not know the job secret (wrong HMAC proof)");
    stage_ = Stage::kReady;
    handshake_timer_.cancel();
    if (is_control()) {
      auto& t = server_->tasks[task_];
      t.seen = t.connected = true;
      t.done = false;
      t.last_heartbeat = Clock::now();
      // A client may have set the key to anything: count from 1 again then.
      std::string& incarnation = server_->kv["incarnation/" + task_];
      incarnation = std::to_string(counter_after_add(incarnation, 1).value_or(1));
      server_->kv["status/" + task_] = "up";
      server_->wake_waiters();
    }
    reply({Op::kWelcome, 0, {}});
  }

  void handle_request(const Message& m) {
    if (const std::string why = request_problem(m); !why.empty()) return reject(why);
    auto& s = *server_;
    switch (m.op) {
      case Op::kSet:
        s.kv[m.fields[0]] = m.fields[1];
        s.wake_waiters();
        return reply({Op::kOk, 0, {}});
      case Op::kGet: {
        auto it = s.kv.find(m.fields[0]);
        if (it == s.kv.end()) return reply({Op::kNotFound, 0, {}});
        return reply({Op::kValue, 0, {it->second}});
      }
      case Op::kAdd: {
        std::string& v = s.kv[m.fields[0]];
        const std::optional<int64_t> now = counter_after_add(v, m.number);
        if (!now)
          return reply({Op::kError, 0, {str("key '", printable(m.fields[0]), "' holds '", printable(v),
                                            "', not a number that ", m.number, " can be added to")}},
                       true);
        v = std::to_string(*now);
        s.wake_waiters();
        return reply({Op::kValue, *now, {}});
      }
      case Op::kWait: {
        if (s.failure) return reply({Op::kError, 0, {*s.failure}});
        const auto deadline = Clock::now() + std::chrono::milliseconds(wait_timeout_ms(m));
        s.waiters.push_back({m.fields, shared_from_this(), deadline});
        return s.wake_waiters();
      }
      case Op::kHeartbeat: {
        if (!is_control()) return reject("sent a heartbeat on a store connection");
        auto& t = s.tasks[task_];
        t.last_heartbeat = Clock::now();
        t.last_step = m.number;
        if (s.failure) {
          t.informed = true;
          s.update_all_done();
          return reply({Op::kStatus, 1, {*s.failure}});
        }
        auto chief = s.tasks.find(s.options.chief);
        const int64_t chief_step = chief == s.tasks.end() ? -1 : chief->second.last_step;
        return reply({Op::kStatus, 0, {std::to_string(chief_step)}});
      }
      case Op::kDone:
        if (is_control()) {
          s.tasks[task_].done = true;
          s.update_all_done();
        }
        return reply({Op::kOk, 0, {}});
      case Op::kClock:
        return reply({Op::kValue, trace::now_us(), {}});
      case Op::kFail:
        s.task_lost(task_, str("task ", s.describe(task_), " failed: ", reply_text(m, "")));
        return reply({Op::kOk, 0, {}});
      default:
        return reject(str("sent an unexpected '", op_name(m.op), "' request"));
    }
  }

  void on_closed() {
    if (stage_ != Stage::kReady || !is_control()) return;
    auto& s = *server_;
    auto& t = s.tasks[task_];
    t.connected = false;
    if (!t.done) {
      s.task_lost(task_, str("task ", s.describe(task_), " was lost ", step_text(t.last_step),
                             ": its connection closed (the process died or was killed)"));
    }
    s.update_all_done();
  }

  tcp::socket socket_;
  // Not owning: the server owns its io_context, whose pending handlers own the
  // connections, so a shared_ptr here was a cycle that kept every server alive
  // (a leak). The handlers run only on the server's I/O thread, which
  // ~StoreServer joins before the state goes; the io_context's destructor then
  // destroys the handlers that were still pending, and with them the connections.
  ServerState* server_;
  asio::steady_timer handshake_timer_;
  unsigned char header_[4] = {};
  std::string body_;
  std::string peer_, task_, role_, server_nonce_;
  Hello hello_;
  Stage stage_ = Stage::kHello;
  bool closed_ = false;
};

void ServerState::start() {
  accept_next();
  sweep();
  thread = std::thread([self = shared_from_this()] { self->io.run(); });
}

void ServerState::accept_next() {
  // `this`, not a shared_ptr: a pending handler must not own the state that owns
  // it (see Connection::server_).
  acceptor.async_accept([this](const std::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true));
      std::make_shared<Connection>(std::move(socket), this)->start();
    }
    accept_next();
  });
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
  for (auto it = waiters.begin(); it != waiters.end();) {
    if (now >= it->deadline) {
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
  log::warn("rendezvous: the job failed: ", why);
  for (auto& w : waiters) w.connection->reply({Op::kError, 0, {why}});
  waiters.clear();
  update_all_done();
}

void ServerState::task_lost(const std::string& task, const std::string& why) {
  if (!options.expendable.count(task)) return fail_job(why);
  if (kv["status/" + task] == "lost") return;
  kv["status/" + task] = "lost";
  std::string& count = kv["lost_count"];
  count = std::to_string(count.empty() ? 1 : std::stoll(count) + 1);
  kv["lost/" + count] = task + "#" + kv["incarnation/" + task];
  log::warn("rendezvous: ", why, "; the job goes on without it (started again, it rejoins)");
  wake_waiters();
  update_all_done();
}

void ServerState::wake_waiters() {
  for (auto it = waiters.begin(); it != waiters.end();) {
    bool ready = true;
    for (const auto& k : it->keys) ready = ready && kv.count(k);
    if (ready) {
      it->connection->reply({Op::kOk, 0, {}});
      it = waiters.erase(it);
    } else {
      ++it;
    }
  }
}

void ServerState::update_all_done() {
  // A task is through when it said done, or came and went, or (once the job
  // failed) was told so or never came.
  bool all = true;
  for (const auto& [name, t] : tasks)
    all = all && (t.done || (t.seen && !t.connected) || (failure && (t.informed || !t.seen)));
  std::lock_guard<std::mutex> lock(done_mutex);
  all_done = all;
  done_cv.notify_all();
}

namespace {

tcp::endpoint resolve_endpoint(asio::io_context& io, const std::string& host, int port) {
  std::error_code ec;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty())
    throw ConfigError(str("cannot resolve the rendezvous address ", host, ":", port, ": ", ec.message()));
  return results.begin()->endpoint();
}

}  // namespace

StoreServer::StoreServer(const std::string& host, int port, ServerOptions options)
    : impl_(std::make_shared<ServerState>(std::move(options))) {
  const tcp::endpoint endpoint = resolve_endpoint(impl_->io, host, port);
  std::error_code ec;
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    const std::string hint = ec == asio::error::address_in_use
                                 ? "; another process is listening there: stop it or give this task another port"
                                 : "";
    throw ConfigError(str("cannot listen on ", host, ":", port, ": ", ec.message(), hint));
  }
  impl_->start();
}

StoreServer::StoreServer(int listen_fd, ServerOptions options)
    : impl_(std::make_shared<ServerState>(std::move(options))) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw ConfigError(str("DTRAIN_LISTEN_FD=", listen_fd, " is not a socket"));
  std::error_code ec;
  impl_->acceptor.assign(addr.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), listen_fd, ec);
  if (ec) throw ConfigError(str("cannot serve on the inherited socket ", listen_fd, ": ", ec.message()));
  impl_->start();
}

void check_can_listen(const std::string& address, const std::string& what) {
  const config::HostPort hp = config::parse_host_port(address, what);
  asio::io_context io;
  tcp::endpoint endpoint;
  try {
    endpoint = resolve_endpoint(io, hp.host, hp.port);
  } catch (const ConfigError&) {
    throw ConfigError(str(what, ": cannot resolve the host of ", address, "; is it this machine's name?"));
  }
  tcp::acceptor acceptor(io);
  std::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (ec == asio::error::address_in_use)
    throw ConfigError(str(what, ": ", address, " is already in use by another process; stop it or pick another port"));
  if (ec)
    throw ConfigError(str(what, ": cannot listen on ", address, " (", ec.message(),
                          "); run this task on the machine that address names"));
}

StoreServer::~StoreServer() {
  asio::post(impl_->io, [impl = impl_] {
    std::error_code ignored;
    impl->acceptor.close(ignored);
    impl->sweep_timer.cancel();
    impl->io.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

int StoreServer::port() const { return impl_->acceptor.local_endpoint().port(); }

int StoreServer::rejected_connections() const { return impl_->rejected.load(); }

void StoreServer::set_task_address(const std::string& task, const std::string& address) {
  asio::post(impl_->io, [impl = impl_, task, address] { impl->tasks[task].address = address; });
}

bool StoreServer::wait_all_done(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(impl_->done_mutex);
  return impl_->done_cv.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                                 [&] { return impl_->all_done; });
}

}  // namespace dtrain::rendezvous
