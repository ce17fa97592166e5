// The framed, authenticated Asio server both of dtrain's servers are built on:
// the rendezvous store (store_server.cpp) and a ps task (ps/ps_server.cpp).
//
//   AsioServer               one io_context run on one thread, an acceptor on an
//                            address or on an inherited listening socket, the
//                            accept loop, the count of rejected connections, an
//                            orderly stop.
//   AuthenticatedConnection  one accepted connection's handshake in rendezvous
//                            frames, within a deadline (no slow-loris): the
//                            client's hello of the server's protocol, the
//                            challenge with the server's proof, the client's proof
//                            of the job secret, welcome (auth.h); then reject
//                            (logged and counted) and close. What comes after the
//                            handshake is the subclass's: the store reads more
//                            frames, a ps its own binary requests.
//
// Every handler runs on the server's one I/O thread, so neither needs locks.
// Include only from code that links Asio (lib/rendezvous, lib/ps).
#pragma once

#include <asio.hpp>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "rendezvous/auth.h"
#include "rendezvous/wire.h"

namespace dtrain::rendezvous {

class AsioServer {
 public:
  AsioServer();
  ~AsioServer();  // stop()
  AsioServer(const AsioServer&) = delete;
  AsioServer& operator=(const AsioServer&) = delete;

  asio::io_context& io() { return io_; }
  // Listens on `endpoint`; a ConfigError "<what>: <the error><in_use_hint when the
  // address is in use>" otherwise.
  void listen(const asio::ip::tcp::endpoint& endpoint, const std::string& what, const std::string& in_use_hint);
  // Serves on an inherited listening socket (DTRAIN_LISTEN_FD); ConfigError when it is none.
  void adopt(int listen_fd);
  // Accepts connections (TCP_NODELAY set) and hands each to `accepted`, on the I/O
  // thread, which starts now.
  void start(std::function<void(asio::ip::tcp::socket)> accepted);
  // Closes the acceptor, runs `on_stop` (timers to cancel) on the I/O thread,
  // stops it and joins it. Idempotent.
  void stop(const std::function<void()>& on_stop = {});

  int port() const { return acceptor_.local_endpoint().port(); }
  int rejected() const { return rejected_.load(); }
  void count_rejected() { ++rejected_; }
  // CPU time the I/O thread has used so far, in seconds (0 before start()).
  double thread_cpu_seconds();

 private:
  void accept_next();

  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;  // after a failed accept (out of descriptors)
  bool accept_error_logged_ = false;
  std::thread thread_;
  std::atomic<int> rejected_{0};
  std::function<void(asio::ip::tcp::socket)> accepted_;
};

// Raises this process's open-file limit to its hard limit, and warns (naming
// `what`, e.g. "the chief's store for 4096 tasks") when `needed` still does not fit.
void raise_descriptor_limit(size_t needed, const std::string& what);

// What a server asks of a connection's handshake.
struct HandshakeRules {
  std::string magic;        // the protocol's hello (kProtocolMagic, the ps's)
  Credentials credentials;  // the job's id and secret
  double timeout_seconds = 10.0;
  uint32_t max_frame_bytes = kMaxFrameBytes;
  std::string log_prefix;  // "rendezvous", "ps:0": how the server's log lines start
  // A client that hangs up after the challenge could not check the server's
  // proof: most likely a task with another secret. Say so (the store) or just close.
  bool hangup_after_challenge_is_rejection = false;
};

class AuthenticatedConnection : public std::enable_shared_from_this<AuthenticatedConnection> {
 public:
  virtual ~AuthenticatedConnection() = default;
  AuthenticatedConnection(const AuthenticatedConnection&) = delete;
  AuthenticatedConnection& operator=(const AuthenticatedConnection&) = delete;

  // Arms the handshake's deadline and reads the hello.
  void start();
  // Closes the socket once (on_closed() then runs).
  void close();
  const std::string& task() const { return task_; }

 protected:
  // `rules` must outlive the connection (the server's).
  AuthenticatedConnection(asio::ip::tcp::socket socket, AsioServer& server, const HandshakeRules& rules);

  // The hello is of the server's protocol: the subclass checks the job, the task
  // and the role; false when it turned the connection away (reject(), or reply(..., true)).
  virtual bool accept_hello(const Hello& hello) = 0;
  // The client proved it knows the secret: the subclass's bookkeeping, before the
  // welcome. Returns the welcome's number (the store: a control connection's incarnation).
  virtual int64_t on_authenticated() { return 0; }
  // A client that said a hello the subclass accepted (its job, a task of the
  // cluster) then failed the secret's proof, or hung up after the challenge
  // (hangup_after_challenge_is_rejection): `why`. Runs after the rejection is
  // logged; the store fails the job with it (a task with another secret would
  // otherwise leave the others waiting out the rendezvous timeout).
  virtual void on_secret_mismatch(const std::string& why) { (void)why; }
  // The welcome is written: the subclass reads its requests (read_frame() for frames).
  virtual void on_ready() = 0;
  // A frame after the handshake, for subclasses that read frames.
  virtual void on_frame(const Message& m);
  virtual void on_closed() {}

  // Drops the connection, saying why in the server's log ("it <why>"), counted;
  // with `told`, the client is first sent a kError saying that.
  void reject(const std::string& why, const std::string& told = "");
  // Writes `m` as a frame, then reads the next frame (or closes, with close_after).
  void reply(const Message& m, bool close_after = false);
  // Reads one frame: the handshake's, then on_frame()'s.
  void read_frame();
  template <class T>
  std::shared_ptr<T> self_as() {
    return std::static_pointer_cast<T>(shared_from_this());
  }

  void set_task(std::string task) { task_ = std::move(task); }
  bool ready() const { return ready_; }
  bool closed() const { return closed_; }
  const Hello& hello() const { return hello_; }
  const std::string& peer() const { return peer_; }
  asio::ip::tcp::socket& socket() { return socket_; }
  AsioServer& server() { return server_; }
  const HandshakeRules& rules() const { return rules_; }

 private:
  void handle_handshake(const Message& m);
  // Writes `m` as a frame, then calls `then` (close() on a write error).
  void write_frame(const Message& m, void (AuthenticatedConnection::*then)());
  // After a rejection's kError: reads and drops what the client still sends
  // until it hangs up, then closes (the linger timer closes it sooner).
  void drain();

  asio::ip::tcp::socket socket_;
  // Not owning: the server owns its io_context, whose pending handlers own the
  // connections (a shared_ptr here was a cycle that kept every server alive: a
  // leak). Handlers run only on the I/O thread, which the server joins before it
  // goes; the io_context's destructor then destroys the pending ones with their
  // connections.
  AsioServer& server_;
  const HandshakeRules& rules_;
  asio::steady_timer handshake_timer_;
  unsigned char header_[4] = {};
  std::string body_;
  std::string peer_, task_, server_nonce_;
  Hello hello_;
  bool said_hello_ = false, ready_ = false, closed_ = false, rejected_ = false;
};

}  // namespace dtrain::rendezvous
