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
// The security rule (docs/cluster.md, "Security model"): nothing a peer says
// before it proved the secret changes the job. A connection that fails the
// handshake is dropped with a warning (rate-limited: a flood cannot fill the
// log) and, when it claimed a task, recorded against that name for the error
// the chief gives at its rendezvous deadline; the job goes on waiting for the
// real task. Until then a frame may be at most kMaxHandshakeFrameBytes.
//
// Every handler runs on the server's one I/O thread, so neither needs locks
// (the failed-proof record, read from other threads, has its own).
//
// Asio stays out of this header: its objects live behind each class's Impl,
// defined in asio_transport.h, which only lib/rendezvous's own sources include
// (the store's server reaches the I/O context through it). A ps task's server
// (ps/ps_server.cpp) uses what is declared here alone: the framed handshake,
// then read_exact() / write_all() for its own requests.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/auth.h"
#include "rendezvous/wire.h"

namespace dtrain::rendezvous {

// The largest frame a peer may send before it proved the secret (a hello, a
// proof): an unauthenticated peer cannot make a server set aside more.
inline constexpr uint32_t kMaxHandshakeFrameBytes = 4096;

// An accepted TCP connection (TCP_NODELAY set), on its way to the connection
// object that serves it. Opaque outside lib/rendezvous.
class AcceptedSocket {
 public:
  struct Impl;  // asio_transport.h
  explicit AcceptedSocket(std::unique_ptr<Impl> impl);
  AcceptedSocket(AcceptedSocket&&) noexcept;
  ~AcceptedSocket();
  std::unique_ptr<Impl> impl;
};

class AsioServer {
 public:
  AsioServer();
  ~AsioServer();  // stop()
  AsioServer(const AsioServer&) = delete;
  AsioServer& operator=(const AsioServer&) = delete;

  // Listens on host:port (a name or an address); a ConfigError "<what>: <the
  // error><in_use_hint when the address is in use>" otherwise.
  void listen(const std::string& host, int port, const std::string& what, const std::string& in_use_hint);
  // Serves on an inherited listening socket (DTRAIN_LISTEN_FD); ConfigError when it is none.
  void adopt(int listen_fd);
  // Accepts connections (TCP_NODELAY set) and hands each to `accepted`, on the I/O
  // thread, which starts now.
  void start(std::function<void(AcceptedSocket)> accepted);
  // Closes the acceptor, runs `on_stop` (timers to cancel) on the I/O thread,
  // stops it and joins it. Idempotent.
  void stop(const std::function<void()>& on_stop = {});

  int port() const;
  int rejected() const { return rejected_.load(); }
  // CPU time the I/O thread has used so far, in seconds (0 before start()).
  double thread_cpu_seconds();

  // How the server's log lines start ("rendezvous", "ps:0"); set before start().
  void set_log_prefix(std::string prefix) { log_prefix_ = std::move(prefix); }
  const std::string& log_prefix() const { return log_prefix_; }
  // A dropped connection: counted, and `line` logged as a warning, at most
  // kRejectionLinesPerWindow lines per kRejectionWindow; the ones past that are
  // counted and summed up in one line when the window ends. I/O thread only.
  void log_rejection(const std::string& line, bool failed_proof);
  // A connection that claimed `task` from `host` and failed the proof of the
  // job secret (at most kMaxRecordedClaims names are kept). I/O thread only.
  void record_failed_proof(const std::string& task, const std::string& host);
  // The failed proofs recorded for `tasks`, e.g. "worker:1 (2 failed proofs, from
  // 127.0.0.1)", joined by "; "; "" when none. Any thread.
  std::string failed_proofs(const std::vector<std::string>& tasks) const;

  static constexpr int kRejectionLinesPerWindow = 5;
  static constexpr std::chrono::seconds kRejectionWindow{10};
  static constexpr size_t kMaxRecordedClaims = 256;

  // The I/O context, acceptor and timers (asio_transport.h: lib/rendezvous only).
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  void accept_next();
  // Logs the count of rejections not logged one by one in this window, if any.
  void log_suppressed();

  std::unique_ptr<Impl> impl_;
  bool accept_error_logged_ = false;
  std::thread thread_;
  std::atomic<int> rejected_{0};
  std::function<void(AcceptedSocket)> accepted_;
  std::string log_prefix_ = "server";

  // The rejection log's rate limit (I/O thread only; its timer in impl_).
  std::chrono::steady_clock::time_point window_start_{};
  int window_lines_ = 0;
  int64_t suppressed_ = 0, suppressed_proofs_ = 0;

  // Failed proofs by claimed task (written on the I/O thread, read by any).
  struct FailedProofs {
    int64_t count = 0;
    std::set<std::string> hosts;  // at most 4 kept
  };
  mutable std::mutex failed_mutex_;
  std::map<std::string, FailedProofs> failed_;
};

// Raises this process's open-file limit to its hard limit, and warns (naming
// `what`, e.g. "the chief's store for 4096 tasks") when `needed` still does not fit.
void raise_descriptor_limit(size_t needed, const std::string& what);

// What a server asks of a connection's handshake.
struct HandshakeRules {
  std::string magic;        // the protocol's hello (kProtocolMagic, the ps's)
  Credentials credentials;  // the job's id and secret
  double timeout_seconds = 10.0;
  uint32_t max_frame_bytes = kMaxFrameBytes;  // after the handshake (before it: kMaxHandshakeFrameBytes)
  std::string log_prefix;  // "rendezvous", "ps:0": how the server's log lines start
};

class AuthenticatedConnection : public std::enable_shared_from_this<AuthenticatedConnection> {
 public:
  virtual ~AuthenticatedConnection();
  AuthenticatedConnection(const AuthenticatedConnection&) = delete;
  AuthenticatedConnection& operator=(const AuthenticatedConnection&) = delete;

  // Arms the handshake's deadline and reads the hello.
  void start();
  // Closes the socket once (on_closed() then runs).
  void close();
  const std::string& task() const { return task_; }

 protected:
  // `rules` must outlive the connection (the server's).
  AuthenticatedConnection(AcceptedSocket socket, AsioServer& server, const HandshakeRules& rules);

  // The hello is of the server's protocol: the subclass checks the job, the task
  // and the role; false when it turned the connection away (reject(), or reply(..., true)).
  virtual bool accept_hello(const Hello& hello) = 0;
  // The client proved it knows the secret: the subclass's bookkeeping, before the
  // welcome. Returns the welcome's number (the store: a control connection's incarnation).
  // Nothing before this may change the server's state: the hello's words are
  // unproven (a failed proof is a warning and a record, never a verdict).
  virtual int64_t on_authenticated() { return 0; }
  // The welcome is written: the subclass reads its requests (read_frame() for frames).
  virtual void on_ready() = 0;
  // A frame after the handshake, for subclasses that read frames.
  virtual void on_frame(const Message& m);
  virtual void on_closed() {}

  // Drops the connection, saying why in the server's log ("it <why>"), counted;
  // with `told`, the client is first sent a kError saying that.
  void reject(const std::string& why, const std::string& told = "");
  // Drops a connection whose hello claimed a task and that then failed the
  // proof (`how`: "sent a wrong proof", ...): "a task claiming worker:1 from
  // HOST failed the proof: another DTRAIN_JOB_SECRET?", recorded for that name.
  void fail_proof(const std::string& how, const std::string& told = "");
  // Writes `m` as a frame, then reads the next frame (or closes, with close_after).
  void reply(const Message& m, bool close_after = false);
  // Reads one frame: the handshake's, then on_frame()'s.
  void read_frame();
  // After the handshake, for a subclass with framing of its own (a ps's
  // requests): reads exactly `bytes` into `into` / writes every piece (gathered,
  // no copy), then calls `then` on the I/O thread with whether it worked (false:
  // the peer went or the socket failed; the caller closes). `into` and the
  // pieces must stay valid until then; the connection stays alive until then.
  void read_exact(void* into, size_t bytes, std::function<void(bool ok)> then);
  void write_all(std::vector<ConstBytes> pieces, std::function<void(bool ok)> then);
  template <class T>
  std::shared_ptr<T> self_as() {
    return std::static_pointer_cast<T>(shared_from_this());
  }

  void set_task(std::string task) { task_ = std::move(task); }
  bool ready() const { return ready_; }
  bool closed() const { return closed_; }
  const Hello& hello() const { return hello_; }
  const std::string& peer() const { return peer_; }
  AsioServer& server() { return server_; }
  const HandshakeRules& rules() const { return rules_; }

 private:
  void handle_handshake(const Message& m);
  // Writes `m` as a frame, then calls `then` (close() on a write error).
  void write_frame(const Message& m, void (AuthenticatedConnection::*then)());
  // Logs `line` (rate-limited), counts the rejection and closes, after telling
  // the client `told` when it is not empty.
  void drop(const std::string& line, bool failed_proof, const std::string& told);
  // After a rejection's kError: reads and drops what the client still sends
  // until it hangs up, then closes (the linger timer closes it sooner).
  void drain();

  struct Impl;  // the socket and the handshake's timer (asio_transport.h)
  std::unique_ptr<Impl> net_;
  // Not owning: the server owns its io_context, whose pending handlers own the
  // connections (a shared_ptr here was a cycle that kept every server alive: a
  // leak). Handlers run only on the I/O thread, which the server joins before it
  // goes; the io_context's destructor then destroys the pending ones with their
  // connections.
  AsioServer& server_;
  const HandshakeRules& rules_;
  unsigned char header_[4] = {};
  std::string body_;
  std::string peer_, host_, task_, server_nonce_;  // peer_: "host:port"; host_: its address
  Hello hello_;
  bool said_hello_ = false, ready_ = false, closed_ = false, rejected_ = false;
};

}  // namespace dtrain::rendezvous
