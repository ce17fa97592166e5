// Implementation of authenticated_server.h.
#include "rendezvous/authenticated_server.h"

#include <sys/socket.h>

#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

#include <chrono>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "rendezvous/asio_transport.h"

namespace dtrain::rendezvous {

using asio::ip::tcp;

AcceptedSocket::AcceptedSocket(std::unique_ptr<Impl> i) : impl(std::move(i)) {}
AcceptedSocket::AcceptedSocket(AcceptedSocket&&) noexcept = default;
AcceptedSocket::~AcceptedSocket() = default;

AsioServer::AsioServer() : impl_(std::make_unique<Impl>()) {}

AsioServer::~AsioServer() { stop(); }

int AsioServer::port() const { return impl_->acceptor.local_endpoint().port(); }

std::optional<tcp::endpoint> resolve_endpoint(asio::io_context& io, const std::string& host, int port,
                                              std::string* error) {
  std::error_code ec;
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(host, std::to_string(port), ec);
  if (!ec && !results.empty()) return results.begin()->endpoint();
  if (error) *error = ec ? ec.message() : std::string("no address");
  return std::nullopt;
}

std::error_code bind_acceptor(tcp::acceptor& acceptor, const tcp::endpoint& endpoint) {
  std::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  return ec;
}

void AsioServer::listen(const std::string& host, int port, const std::string& what, const std::string& in_use_hint) {
  std::string error;
  const std::optional<tcp::endpoint> endpoint = resolve_endpoint(impl_->io, host, port, &error);
  if (!endpoint) throw ConfigError(str(what, ": cannot resolve '", host, "': ", error));
  std::error_code ec = bind_acceptor(impl_->acceptor, *endpoint);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw ConfigError(str(what, ": ", ec.message(), ec == asio::error::address_in_use ? in_use_hint : std::string()));
}

void AsioServer::adopt(int listen_fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw ConfigError(str("DTRAIN_LISTEN_FD=", listen_fd, " is not a socket"));
  std::error_code ec;
  impl_->acceptor.assign(addr.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), listen_fd, ec);
  if (ec) throw ConfigError(str("cannot serve on the inherited socket ", listen_fd, ": ", ec.message()));
}

void AsioServer::start(std::function<void(AcceptedSocket)> accepted) {
  accepted_ = std::move(accepted);
  accept_next();
  thread_ = std::thread([this] { impl_->io.run(); });
}

double AsioServer::thread_cpu_seconds() {
  if (!thread_.joinable()) return 0.0;
  clockid_t clock;
  timespec used{};
  if (pthread_getcpuclockid(thread_.native_handle(), &clock) != 0 || clock_gettime(clock, &used) != 0) return 0.0;
  return static_cast<double>(used.tv_sec) + static_cast<double>(used.tv_nsec) * 1e-9;
}

void AsioServer::accept_next() {
  impl_->acceptor.async_accept([this](const std::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true));
      accepted_(AcceptedSocket(std::make_unique<AcceptedSocket::Impl>(AcceptedSocket::Impl{std::move(socket)})));
      return accept_next();
    }
    // Out of descriptors (or another error that the next try would repeat at
    // once): say so once, and try again in 100 ms instead of spinning.
    if (!accept_error_logged_) {
      log::warn("cannot accept a connection: ", ec.message(),
                ec == asio::error::no_descriptors ? " (raise the open-file limit: ulimit -n)" : "",
                "; retrying every 100 ms");
      accept_error_logged_ = true;
    }
    impl_->accept_retry.expires_after(std::chrono::milliseconds(100));
    impl_->accept_retry.async_wait([this](const std::error_code& wait_ec) {
      if (!wait_ec) accept_next();
    });
  });
}

void raise_descriptor_limit(size_t needed, const std::string& what) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur < needed)
    log::warn(what, " needs about ", needed, " open files but this process may open ", limit.rlim_cur,
              "; connections past that are refused until some close: raise the limit (ulimit -n ", needed, ")");
}

void AsioServer::stop(const std::function<void()>& on_stop) {
  if (!thread_.joinable()) return;
  asio::post(impl_->io, [this, on_stop] {
    std::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->accept_retry.cancel();
    impl_->rejection_timer.cancel();
    log_suppressed();
    if (on_stop) on_stop();
    impl_->io.stop();
  });
  thread_.join();
}

void AsioServer::log_rejection(const std::string& line, bool failed_proof) {
  ++rejected_;
  const auto now = std::chrono::steady_clock::now();
  if (now - window_start_ >= kRejectionWindow) {
    log_suppressed();
    window_start_ = now;
    window_lines_ = 0;
  }
  if (window_lines_ < kRejectionLinesPerWindow) {
    ++window_lines_;
    return log::warn(line);
  }
  suppressed_proofs_ += failed_proof ? 1 : 0;
  if (suppressed_++ > 0) return;
  // The first line past the limit: the window's end says how many followed.
  impl_->rejection_timer.expires_at(window_start_ + kRejectionWindow);
  impl_->rejection_timer.async_wait([this](const std::error_code& ec) {
    if (!ec) log_suppressed();
  });
}

void AsioServer::log_suppressed() {
  if (suppressed_ == 0) return;
  log::warn(log_prefix_, ": dropped ", suppressed_, " more connection(s) in ", kRejectionWindow.count(),
            " s without a line each (", suppressed_proofs_, " of them failed the proof of the job secret); at most ",
            kRejectionLinesPerWindow, " lines per ", kRejectionWindow.count(), " s. The job goes on");
  suppressed_ = suppressed_proofs_ = 0;
}

void AsioServer::record_failed_proof(const std::string& task, const std::string& host) {
  std::lock_guard<std::mutex> lock(failed_mutex_);
  auto it = failed_.find(task);
  if (it == failed_.end()) {
    if (failed_.size() >= kMaxRecordedClaims) return;
    it = failed_.emplace(task, FailedProofs{}).first;
  }
  ++it->second.count;
  if (it->second.hosts.size() < 4) it->second.hosts.insert(host);
}

std::string AsioServer::failed_proofs(const std::vector<std::string>& tasks) const {
  std::lock_guard<std::mutex> lock(failed_mutex_);
  std::vector<std::string> parts;
  for (const std::string& task : tasks) {
    auto it = failed_.find(task);
    if (it == failed_.end()) continue;
    parts.push_back(str(task, " (", it->second.count, " failed proof", it->second.count == 1 ? "" : "s", ", from ",
                        join(std::vector<std::string>(it->second.hosts.begin(), it->second.hosts.end()), ", "), ")"));
  }
  return join(parts, "; ");
}

AuthenticatedConnection::AuthenticatedConnection(AcceptedSocket socket, AsioServer& server, const HandshakeRules& rules)
    : net_(std::make_unique<Impl>(Impl{std::move(socket.impl->socket), asio::steady_timer(server.impl().io)})),
      server_(server),
      rules_(rules) {
  std::error_code ec;
  const auto endpoint = net_->socket.remote_endpoint(ec);
  host_ = ec ? "an unknown address" : endpoint.address().to_string();
  peer_ = ec ? host_ : str(host_, ":", endpoint.port());
}

AuthenticatedConnection::~AuthenticatedConnection() = default;

void AuthenticatedConnection::start() {
  // A connection that has not authenticated in time is dropped (no slow-loris).
  net_->handshake_timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(rules_.timeout_seconds)));
  auto self = shared_from_this();
  net_->handshake_timer.async_wait([self](const std::error_code& ec) {
    if (ec || self->ready_) return;
    if (self->said_hello_) return self->fail_proof(str("sent no proof within ", self->rules_.timeout_seconds, " s"));
    self->reject("did not complete the handshake in time");
  });
  read_frame();
}

void AuthenticatedConnection::close() {
  if (closed_) return;
  closed_ = true;
  std::error_code ignored;
  net_->handshake_timer.cancel();
  net_->socket.shutdown(tcp::socket::shutdown_both, ignored);
  net_->socket.close(ignored);
  on_closed();
}

void AuthenticatedConnection::reject(const std::string& why, const std::string& told) {
  const std::string who = task_.empty() ? "" : ready_ ? " (" + task_ + ")" : " (claiming " + task_ + ")";
  drop(str(rules_.log_prefix, ": dropped the connection from ", peer_, who, ": it ", why), false, told);
}

void AuthenticatedConnection::fail_proof(const std::string& how, const std::string& told) {
  if (closed_ || rejected_) return;
  const std::string claimed = printable(hello_.task);
  server_.record_failed_proof(claimed, host_);
  drop(str(rules_.log_prefix, ": a task claiming ", claimed, " from ", host_, " failed the proof: another "
           "DTRAIN_JOB_SECRET? (it ", how, "). Dropped; nothing it said counts, the job goes on"),
       true, told);
}

void AuthenticatedConnection::drop(const std::string& line, bool failed_proof, const std::string& told) {
  if (closed_ || rejected_) return;  // (counted and logged once)
  rejected_ = true;
  server_.log_rejection(line, failed_proof);
  if (told.empty()) return close();
  // Said, then a lingering close: closing with the client's requests unread (it
  // sends them with its proof) would reset the connection and could discard
  // the kError before it left. At most 1 s.
  auto self = shared_from_this();
  net_->handshake_timer.expires_after(std::chrono::seconds(1));  // (ends the handshake's own wait)
  net_->handshake_timer.async_wait([self](const std::error_code& ec) {
    if (!ec) self->close();
  });
  auto frame = std::make_shared<std::string>(encode_frame({Op::kError, 0, {told}}));
  asio::async_write(net_->socket, asio::buffer(*frame), [self, frame](const std::error_code& ec, size_t) {
    if (ec) return self->close();
    std::error_code ignored;
    self->net_->socket.shutdown(tcp::socket::shutdown_send, ignored);
    self->drain();
  });
}

void AuthenticatedConnection::drain() {
  auto self = shared_from_this();
  body_.resize(4096);
  net_->socket.async_read_some(asio::buffer(body_), [self](const std::error_code& ec, size_t) {
    if (ec) return self->close();  // (end of file: the client hung up)
    self->drain();
  });
}

void AuthenticatedConnection::write_frame(const Message& m, void (AuthenticatedConnection::*then)()) {
  auto self = shared_from_this();
  auto frame = std::make_shared<std::string>(encode_frame(m));
  asio::async_write(net_->socket, asio::buffer(*frame), [self, frame, then](const std::error_code& ec, size_t) {
    if (ec) return self->close();
    ((*self).*then)();
  });
}

void AuthenticatedConnection::reply(const Message& m, bool close_after) {
  write_frame(m, close_after ? &AuthenticatedConnection::close : &AuthenticatedConnection::read_frame);
}

void AuthenticatedConnection::read_frame() {
  auto self = shared_from_this();
  asio::async_read(net_->socket, asio::buffer(header_), [self](const std::error_code& ec, size_t) {
    // A client that hangs up after the challenge could not check the server's
    // proof: most likely a task with another secret (which itself says so).
    if (ec && self->said_hello_ && !self->ready_)
      return self->fail_proof("hung up after the challenge: it could not verify this server's proof");
    if (ec) return self->close();
    const uint32_t length = decode_length(self->header_);
    const uint32_t limit = self->ready_ ? self->rules_.max_frame_bytes : kMaxHandshakeFrameBytes;
    if (length > limit)
      return self->reject(str("sent a frame of ", length, " bytes (limit ", limit,
                              self->ready_ ? "" : " before it proved the job secret", ")"));
    self->body_.assign(length, '\0');
    asio::async_read(self->net_->socket, asio::buffer(self->body_), [self](const std::error_code& ec2, size_t) {
      if (ec2) return self->close();
      Message m;
      if (!decode_payload(self->body_, m)) return self->reject("sent a malformed frame");
      if (self->ready_) return self->on_frame(m);
      self->handle_handshake(m);
    });
  });
}

void AuthenticatedConnection::read_exact(void* into, size_t bytes, std::function<void(bool ok)> then) {
  auto self = shared_from_this();
  asio::async_read(net_->socket, asio::buffer(into, bytes),
                   [self, then = std::move(then)](const std::error_code& ec, size_t) { then(!ec); });
}

void AuthenticatedConnection::write_all(std::vector<ConstBytes> pieces, std::function<void(bool ok)> then) {
  std::vector<asio::const_buffer> buffers;
  for (const ConstBytes& p : pieces) buffers.push_back(asio::buffer(p.data, p.size));
  auto self = shared_from_this();
  asio::async_write(net_->socket, buffers,
                    [self, then = std::move(then)](const std::error_code& ec, size_t) { then(!ec); });
}

void AuthenticatedConnection::on_frame(const Message& m) {
  reject(str("sent an unexpected '", op_name(m.op), "' frame"));
}

void AuthenticatedConnection::handle_handshake(const Message& m) {
  const Credentials& creds = rules_.credentials;
  if (!said_hello_) {
    if (const std::string why = read_hello(m, rules_.magic, &hello_); !why.empty()) return reject(why);
    if (!accept_hello(hello_)) return;
    said_hello_ = true;
    server_nonce_ = make_nonce();
    return reply({Op::kChallenge, 0, {server_nonce_, server_proof(creds, hello_.client_nonce, server_nonce_)}});
  }
  if (!proof_accepted(m, creds, hello_, server_nonce_))
    // (said, so that the client can tell it from a server that went away)
    return fail_proof("sent a wrong proof", "wrong proof of the job secret");
  ready_ = true;
  net_->handshake_timer.cancel();
  const int64_t number = on_authenticated();
  write_frame({Op::kWelcome, number, {}}, &AuthenticatedConnection::on_ready);
}

}  // namespace dtrain::rendezvous
