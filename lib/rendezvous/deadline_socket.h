// DeadlineSocket: a TCP client socket whose blocking operations have deadlines,
// made of Asio's asynchronous operations and io_context::run_one_until(). The
// store's client (store_client.h) and the ps's client (ps/ps_client.h) are built
// on it. Used from one thread at a time. Asio stays behind Impl
// (asio_transport.h, lib/rendezvous's own sources only): the ps's client uses
// write_all() / read_exact().
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/wire.h"

namespace dtrain::rendezvous {

// How a blocking transfer ended.
enum class Transfer {
  kDone,
  kTimedOut,  // the deadline passed first (the socket is closed)
  kClosed,    // the peer closed the connection (or reset it)
  kFailed,    // another socket error (the text says which)
};

class DeadlineSocket {
 public:
  using Clock = std::chrono::steady_clock;

  DeadlineSocket();
  ~DeadlineSocket();
  DeadlineSocket(const DeadlineSocket&) = delete;
  DeadlineSocket& operator=(const DeadlineSocket&) = delete;

  // Connects to host:port, retrying a refused connection every 100 ms until
  // `timeout_seconds` pass, then TimeoutError: "could not reach <what> within T s
  // (last error: ...); <hint>". `on_waiting` is called about every 5 s while
  // waiting. An unresolvable host is a ConfigError. Sets TCP_NODELAY. When
  // `cancelled` says so between attempts, RuntimeError (the caller is stopping).
  void connect(const std::string& host, const std::string& port, double timeout_seconds, const std::string& what,
               const std::string& hint, const std::function<void(const std::string&)>& on_waiting = {},
               const std::function<bool()>& cancelled = {});

  // Writes every piece (gathered into one write) / reads exactly `bytes`, within
  // `timeout`. Anything but kDone: `error` (if given) gets the socket's words.
  Transfer write_all(const std::vector<ConstBytes>& pieces, Clock::duration timeout, std::string* error = nullptr);
  Transfer read_exact(void* into, size_t bytes, Clock::duration timeout, std::string* error = nullptr);
  // Closes the socket (idempotent).
  void close();

  // The I/O context and socket (asio_transport.h: lib/rendezvous only).
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::rendezvous
