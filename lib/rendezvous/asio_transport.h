// The Asio objects behind the transport's Asio-free headers
// (authenticated_server.h, deadline_socket.h): the only header that includes
// Asio, for lib/rendezvous's own sources (the store's server and client, the
// transport's implementation). tests/unit/architecture fails where another
// module includes Asio or this header.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <system_error>

#include "rendezvous/authenticated_server.h"
#include "rendezvous/deadline_socket.h"

namespace dtrain::rendezvous {

struct AcceptedSocket::Impl {
  asio::ip::tcp::socket socket;
};

struct AsioServer::Impl {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};     // after a failed accept (out of descriptors)
  asio::steady_timer rejection_timer{io};  // ends a window with suppressed rejection lines
};

struct AuthenticatedConnection::Impl {
  asio::ip::tcp::socket socket;
  asio::steady_timer handshake_timer;
};

struct DeadlineSocket::Impl {
  asio::io_context io;
  asio::ip::tcp::socket socket{io};

  // Runs the io_context until `done` or `timeout`; on the timeout closes the
  // socket (cancelling its operations), drains their handlers, returns false.
  bool run_until(const bool& done, DeadlineSocket::Clock::duration timeout);
};

// host:port's first address; std::nullopt with the resolver's words in `error`.
std::optional<asio::ip::tcp::endpoint> resolve_endpoint(asio::io_context& io, const std::string& host, int port,
                                                        std::string* error);
// Opens `acceptor` on `endpoint` (reuse_address) and binds it; the first error.
std::error_code bind_acceptor(asio::ip::tcp::acceptor& acceptor, const asio::ip::tcp::endpoint& endpoint);

// How an Asio error ends a transfer (eof, reset, broken pipe: the peer closed;
// anything else kFailed; only the caller's deadline is kTimedOut).
Transfer transfer_of(const std::error_code& ec);

}  // namespace dtrain::rendezvous
