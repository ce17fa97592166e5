// Implementation of deadline_socket.h.
#include "rendezvous/deadline_socket.h"

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::rendezvous {

using asio::ip::tcp;

bool DeadlineSocket::run_until(const bool& done, Clock::duration timeout) {
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
  tcp::resolver resolver(io);
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
    asio::async_connect(socket, endpoints, [&](const std::error_code& e, const tcp::endpoint&) {
      ec = e;
      done = true;
    });
    if (!run_until(done, budget)) ec = asio::error::timed_out;
    // On loopback, a connect to a port in the ephemeral range with no listener
    // can "succeed" by connecting the socket to itself (TCP simultaneous open).
    if (!ec) {
      std::error_code e1, e2;
      if (socket.local_endpoint(e1) != socket.remote_endpoint(e2) || e1 || e2) break;
      ec = asio::error::connection_refused;
    }
    std::error_code ignored;
    socket.close(ignored);
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
  socket.set_option(tcp::no_delay(true));
}

}  // namespace dtrain::rendezvous
