// DeadlineSocket: a TCP client socket whose blocking operations have deadlines,
// made of Asio's asynchronous operations and io_context::run_one_until(). The
// store's client (store_client.h) and the ps's client (ps/ps_client.h) are built
// on it. Used from one thread at a time.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <functional>
#include <string>

namespace dtrain::rendezvous {

class DeadlineSocket {
 public:
  using Clock = std::chrono::steady_clock;

  asio::io_context io;
  asio::ip::tcp::socket socket{io};

  // Runs the io_context until `done` or `timeout`; on the timeout closes the
  // socket (cancelling its operations), drains their handlers, returns false.
  bool run_until(const bool& done, Clock::duration timeout);

  // Connects to host:port, retrying a refused connection every 100 ms until
  // `timeout_seconds` pass, then TimeoutError: "could not reach <what> within T s
  // (last error: ...); <hint>". `on_waiting` is called about every 5 s while
  // waiting. An unresolvable host is a ConfigError. Sets TCP_NODELAY. When
  // `cancelled` says so between attempts, RuntimeError (the caller is stopping).
  void connect(const std::string& host, const std::string& port, double timeout_seconds, const std::string& what,
               const std::string& hint, const std::function<void(const std::string&)>& on_waiting = {},
               const std::function<bool()>& cancelled = {});
};

}  // namespace dtrain::rendezvous
