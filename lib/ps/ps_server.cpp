// Implementation of ps_server.h on the transport's authenticated server
// (rendezvous/authenticated_server.h: one I/O thread); each PsConnection reads
// one request, handles it and writes its reply (a sync round or the staleness
// bound may hold a push's reply back), then reads the next.
#include "ps/ps_server.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "ps/ps_wire.h"
#include "rendezvous/authenticated_server.h"
#include "rendezvous/wire.h"

namespace dtrain::ps {

using rendezvous::Message;
using rendezvous::Op;

class PsConnection;

struct PsServerState {
  PsServerState(ShardStore& s, PsServerOptions o) : shards(s), options(std::move(o)) {
    rules.magic = kPsProtocolMagic;
    rules.credentials = options.credentials;
    rules.timeout_seconds = options.handshake_timeout;
    rules.max_frame_bytes = 4096;  // a handshake frame; requests are PsHeader-framed
    rules.log_prefix = options.task;
    server.set_log_prefix(rules.log_prefix);
    live.insert(options.workers.begin(), options.workers.end());
    for (const auto& w : options.workers) clocks[w] = 0;
  }

  // First, so it goes last: ~PsServer stops its I/O thread before anything goes.
  rendezvous::AsioServer server;
  ShardStore& shards;
  PsServerOptions options;
  rendezvous::HandshakeRules rules;
  std::atomic<int64_t> version{0};
  int64_t pushes = 0;

  // Touched only on the I/O thread:
  std::set<std::string> live;                                   // workers whose pushes count
  std::map<std::string, std::shared_ptr<PsConnection>> round;   // sync: this round's pushers
  std::vector<float> round_sum;                                 // sync: their payloads summed
  std::map<std::string, int64_t> clocks;                        // stale: pushes per live worker
  std::vector<std::shared_ptr<PsConnection>> parked;            // stale: replies held back

  bool is_worker(const std::string& task) const {
    return std::find(options.workers.begin(), options.workers.end(), task) != options.workers.end();
  }
  void applied() {
    const int64_t v = ++version;
    if (options.on_update) options.on_update(v);
  }
  void push(const std::shared_ptr<PsConnection>& c, const std::string& task, const float* payload, int64_t clock);
  void worker_joined(const std::string& task);
  void worker_left(const std::string& task);
  void maybe_finish_round();
  int64_t slowest_clock() const;
  void release_parked();
};

// One client's connection: the handshake (rendezvous/authenticated_server.h),
// then PsHeader-framed requests, one reply each.
class PsConnection final : public rendezvous::AuthenticatedConnection {
 public:
  PsConnection(rendezvous::AcceptedSocket socket, PsServerState* server)
      : AuthenticatedConnection(std::move(socket), server->server, server->rules), server_(server) {}

  // Sends a reply whose payload is copied now (the variables may change before
  // the write completes), then reads the next request.
  void send(PsOp op, int64_t a, int64_t b, const void* data, size_t bytes, bool close_after = false) {
    out_header_ = PsHeader{static_cast<uint32_t>(op), 0, a, b, bytes};
    out_.resize(bytes);
    if (bytes) std::memcpy(out_.data(), data, bytes);
    write(close_after);
  }
  void send_values() {
    const int64_t n = server_->shards.elements();
    out_header_ = PsHeader{static_cast<uint32_t>(PsOp::kValues), 0, server_->version.load(), 0,
                           static_cast<uint64_t>(n) * 4};
    out_.resize(static_cast<size_t>(n) * 4);
    server_->shards.write_values(reinterpret_cast<float*>(out_.data()));
    write(false);
  }
  void send_error(const std::string& message) { send(PsOp::kError, 0, 0, message.data(), message.size(), true); }

 private:
  void write(bool close_after) {
    auto self = self_as<PsConnection>();
    // Scatter/gather: the header and the payload in one write, no copy into a frame.
    write_all({{&out_header_, sizeof out_header_}, {out_.data(), out_.size()}}, [self, close_after](bool ok) {
      if (!ok || close_after) return self->close();
      self->read_request();
    });
  }

  bool accept_hello(const rendezvous::Hello& hello) override {
    const auto& creds = server_->options.credentials;
    if (hello.job_id != creds.job_id) {
      reject(rendezvous::other_job_text(hello, creds));
      return false;
    }
    return true;
  }

  int64_t on_authenticated() override {
    set_task(hello().task);
    if (server_->is_worker(task())) server_->worker_joined(task());
    return 0;
  }

  void on_ready() override { read_request(); }

  void on_closed() override {
    if (ready() && server_->is_worker(task()) && !said_bye_) server_->worker_left(task());
  }

  // --- requests ---
  void read_request() {
    auto self = self_as<PsConnection>();
    read_exact(&in_header_, sizeof in_header_, [self](bool ok) {
      if (!ok) return self->close();
      const PsLimits limits{static_cast<uint64_t>(self->server_->shards.elements()) * 4,
                            static_cast<uint64_t>(self->server_->shards.state_elements()) * 4};
      if (const std::string why = request_header_problem(self->in_header_, limits); !why.empty())
        return self->reject(why);
      self->in_.resize(self->in_header_.payload_bytes);
      self->read_exact(self->in_.data(), self->in_.size(), [self](bool ok2) {
        if (!ok2) return self->close();
        self->handle_request();
      });
    });
  }

  void handle_request() {
    PsServerState& s = *server_;
    const PsHeader h = in_header_;
    const auto* floats = reinterpret_cast<const float*>(in_.data());
    switch (static_cast<PsOp>(h.op)) {
      case PsOp::kPull:
        return send_values();
      case PsOp::kPushPull:
        if (h.payload_bytes != static_cast<uint64_t>(s.shards.elements()) * 4)
          return send_error(str("a push to ", s.options.task, " carries ", s.shards.elements() * 4, " bytes, not ",
                                h.payload_bytes, ": another model or placement?"));
        if (!s.is_worker(task())) return reject("pushed gradients but is not a training worker");
        said_bye_ = false;  // a worker that paused (bye) and got more work counts again
        s.worker_joined(task());
        return s.push(self_as<PsConnection>(), task(), floats, h.a);
      case PsOp::kFetch: {
        std::vector<float> state(static_cast<size_t>(s.shards.state_elements()));
        s.shards.write_state(state.data());
        return send(PsOp::kState, s.version.load(), 0, state.data(), state.size() * 4);
      }
      case PsOp::kAssign:
        if (h.payload_bytes != static_cast<uint64_t>(s.shards.state_elements()) * 4)
          return send_error(str("an assign to ", s.options.task, " must carry ", s.shards.state_elements() * 4,
                                " bytes, not ", h.payload_bytes));
        s.shards.read_state(floats);
        s.version = h.a;
        return send(PsOp::kOk, s.version.load(), 0, nullptr, 0);
      case PsOp::kStats:
        return send(PsOp::kOk, s.version.load(), s.pushes, nullptr, 0);
      case PsOp::kSave:
        return save(std::string(in_.begin(), in_.end()), h.a);
      case PsOp::kBye:
        said_bye_ = true;
        if (s.is_worker(task())) s.worker_left(task());
        return send(PsOp::kOk, s.version.load(), 0, nullptr, 0);
      default:
        return reject(str("sent an unknown request (op ", h.op, ")"));
    }
  }

  // Writes this ps's shards into the checkpoint's temporary directory `name`
  // (on the I/O thread: pushes wait meanwhile, so the file is one version).
  void save(const std::string& name, int64_t step) {
    PsServerState& s = *server_;
    if (const std::string why = save_name_problem(name); !why.empty()) return reject(why);
    if (s.options.checkpoint_dir.empty())
      return send_error(str(s.options.task, " has no checkpoint directory (checkpoint.dir or output.dir) to save into"));
    const std::string dir = (std::filesystem::path(s.options.checkpoint_dir) / name).string();
    try {
      const checkpoint::FileDigest d = s.shards.save(dir, step, s.version.load());
      send(PsOp::kSaved, s.version.load(), static_cast<int64_t>(d.bytes), d.sha256.data(), d.sha256.size());
    } catch (const Error& e) {
      log::warn(s.options.task, ": could not write its checkpoint shards: ", e.what());
      send_error(str("could not write its shards into ", dir, ": ", e.what()));
    }
  }

  // Not owning: see AuthenticatedConnection's server_.
  PsServerState* server_;
  PsHeader in_header_{}, out_header_{};
  std::vector<char> in_, out_;
  bool said_bye_ = false;
};

void PsServerState::push(const std::shared_ptr<PsConnection>& c, const std::string& task, const float* payload,
                         int64_t clock) {
  ++pushes;
  if (options.mode == UpdateMode::kSync) {
    if (round.count(task)) return c->send_error(str(task, " pushed twice in one round"));
    const size_t n = static_cast<size_t>(shards.elements());
    if (round.empty()) {
      round_sum.assign(payload, payload + n);
    } else {
      for (size_t i = 0; i < n; ++i) round_sum[i] += payload[i];
    }
    round[task] = c;
    live.insert(task);
    return maybe_finish_round();
  }
  shards.apply(payload, 1.0f, version.load());
  applied();
  if (options.mode == UpdateMode::kAsync) return c->send_values();
  clocks[task] = std::max(clocks[task], clock + 1);
  parked.push_back(c);
  release_parked();
}

void PsServerState::maybe_finish_round() {
  if (round.empty()) return;
  for (const std::string& w : live)
    if (!round.count(w)) return;  // still waiting for a live worker's push
  shards.apply(round_sum.data(), 1.0f / static_cast<float>(round.size()), version.load());
  applied();
  auto pushers = std::move(round);
  round.clear();
  for (auto& [task, c] : pushers) c->send_values();
}

int64_t PsServerState::slowest_clock() const {
  int64_t slowest = INT64_MAX;
  for (const std::string& w : live) slowest = std::min(slowest, clocks.at(w));
  return slowest == INT64_MAX ? 0 : slowest;
}

void PsServerState::release_parked() {
  const int64_t slowest = slowest_clock();
  std::vector<std::shared_ptr<PsConnection>> still;
  for (auto& c : parked) {
    if (clocks[c->task()] > slowest + options.max_staleness && live.count(c->task()))
      still.push_back(c);
    else
      c->send_values();
  }
  parked = std::move(still);
}

void PsServerState::worker_joined(const std::string& task) {
  if (live.count(task)) return;
  // A worker that comes back counts from now: at the slowest live worker's clock.
  clocks[task] = slowest_clock();
  live.insert(task);
}

void PsServerState::worker_left(const std::string& task) {
  if (!live.erase(task)) return;
  round.erase(task);
  maybe_finish_round();
  release_parked();
}

PsServer::PsServer(ShardStore& shards, PsServerOptions options, int listen_fd, const std::string& host, int port)
    : state_(std::make_shared<PsServerState>(shards, std::move(options))) {
  if (listen_fd >= 0) {
    state_->server.adopt(listen_fd);
  } else {
    state_->server.listen(host, port, str(state_->options.task, ": cannot listen on ", host, ":", port),
                          "; another process holds that port");
  }
  // `this` state, not a shared_ptr: a pending handler must not own the state that owns it.
  state_->server.start([s = state_.get()](rendezvous::AcceptedSocket socket) {
    std::make_shared<PsConnection>(std::move(socket), s)->start();
  });
}

PsServer::~PsServer() { state_->server.stop(); }

int PsServer::port() const { return state_->server.port(); }
int64_t PsServer::version() const { return state_->version.load(); }
int PsServer::rejected_connections() const { return state_->server.rejected(); }

}  // namespace dtrain::ps
