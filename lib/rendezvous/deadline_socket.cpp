// Implementation of deadline_socket.h.
#include "rendezvous/deadline_socket.h"

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "core/strings.h"
#include "rendezvous/asio_transport.h"

namespace dtrain::rendezvous {

using asio::ip::tcp;

Transfer transfer_of(const std::error_code& ec) {
  if (!ec) return Transfer::kDone;
  if (ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
      ec == asio::error::bad_descriptor)
    return Transfer::kClosed;
  return Transfer::kFailed;  // (the socket's own ETIMEDOUT too: kTimedOut is the deadline's)
}

DeadlineSocket::DeadlineSocket() : impl_(std::make_unique<Impl>()) {}
DeadlineSocket::~DeadlineSocket() = default;

void DeadlineSocket::close() {
  std::error_code ignored;
  impl_->socket.close(ignored);
}

namespace {

// Runs the asynchronous `start(handler)` on the socket to its end or `timeout`.
template <class Start>
Transfer run_transfer(DeadlineSocket::Impl& impl, DeadlineSocket::Clock::duration timeout, std::string* error,
                      Start start) {
  bool done = false;
  std::error_code result;
  start([&](const std::error_code& ec, size_t) {
    result = ec;
    done = true;
  });
  if (!impl.run_until(done, timeout)) return Transfer::kTimedOut;
  if (result && error) *error = result.message();
  return transfer_of(result);
}

}  // namespace

Transfer DeadlineSocket::write_all(const std::vector<ConstBytes>& pieces, Clock::duration timeout, std::string* error) {
  std::vector<asio::const_buffer> buffers;
  for (const ConstBytes& p : pieces) buffers.push_back(asio::buffer(p.data, p.size));
  return run_transfer(*impl_, timeout, error,
                      [&](auto handler) { asio::async_write(impl_->socket, buffers, handler); });
}

Transfer DeadlineSocket::read_exact(void* into, size_t bytes, Clock::duration timeout, std::string* error) {
  return run_transfer(*impl_, timeout, error,
                      [&](auto handler) { asio::async_read(impl_->socket, asio::buffer(into, bytes), handler); });
}

bool DeadlineSocket::Impl::run_until(const bool& done, DeadlineSocket::Clock::duration timeout) {
  io.restart();
  const auto deadline = Clock::now() + timeout;
  while (!done && Clock::now() < deadline) io.run_one_until(deadline);
  if (done) return true;
  std::error_code ignored;
  socket.close(ignored);
  io.restart();
  io.run();
  return false;
}

void DeadlineSocket::connect(const std::string& host, const std::string& port, double timeout_seconds,
                             const std::string& what, const std::string& hint,
                             const std::function<void(const std::string&)>& on_waiting,
                             const std::function<bool()>& cancelled) {
  tcp::resolver resolver(impl_->io);
  std::error_code ec;
  const auto endpoints = resolver.resolve(host, port, ec);
  if (ec) throw ConfigError(str("cannot resolve ", what, ": ", ec.message()));
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  auto next_report = start + std::chrono::seconds(5);
  std::error_code last;  // the last attempt that had its full time: what the message reports
  while (true) {
    bool done = false;
    const Clock::duration budget = std::min<Clock::duration>(deadline - Clock::now(), std::chrono::seconds(2));
    asio::async_connect(impl_->socket, endpoints, [&](const std::error_code& e, const tcp::endpoint&) {
      ec = e;
      done = true;
    });
    if (!impl_->run_until(done, budget)) ec = asio::error::timed_out;
    // On loopback, a connect to a port in the ephemeral range with no listener
    // can "succeed" by connecting the socket to itself (TCP simultaneous open).
    if (!ec) {
      std::error_code e1, e2;
      if (impl_->socket.local_endpoint(e1) != impl_->socket.remote_endpoint(e2) || e1 || e2) break;
      ec = asio::error::connection_refused;
    }
    std::error_code ignored;
    impl_->socket.close(ignored);
    // An attempt the deadline cut short says nothing new about the peer.
    if (!last || ec != asio::error::timed_out || budget >= std::chrono::seconds(2)) last = ec;
    if (on_waiting && Clock::now() >= next_report) {
      on_waiting(str("waiting for ", what, " (", ec.message(), ")"));
      next_report += std::chrono::seconds(5);
    }
    if (Clock::now() >= deadline)
      throw TimeoutError(str("could not reach ", what, " within ", timeout_seconds, " s (last error: ", last.message(),
                             "); ", hint));
    if (cancelled && cancelled()) throw RuntimeError(str("stopped trying to reach ", what));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  impl_->socket.set_option(tcp::no_delay(true));
}

}  // namespace dtrain::rendezvous
