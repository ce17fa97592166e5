// Implementation of store_client.h: blocking calls built from Asio's asynchronous
// operations and io_context::run_for(), which is how a deadline is put on them.
#include "rendezvous/store_client.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "core/trace.h"
#include "rendezvous/asio_transport.h"
#include "rendezvous/wire.h"

namespace dtrain::rendezvous {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

struct StoreClient::Impl {
  ClientOptions options;
  DeadlineSocket link;
  asio::io_context& io = link.impl().io;
  tcp::socket& socket = link.impl().socket;
  std::string where;  // "the chief (chief:0 at 127.0.0.1:2222)"
  // With options.prove_with_first_request: the proof that goes out with the
  // first requests, and its handshake (which checks the welcome that comes back first).
  struct PendingProof {
    ClientHandshake handshake;
    Message proof;
  };
  std::optional<PendingProof> proof_pending;
  int64_t welcome_number = 0;

  bool run_until(const bool& done, Clock::duration timeout) { return link.impl().run_until(done, timeout); }

  void connect(const std::string& host, int port) {
    link.connect(host, std::to_string(port), options.connect_timeout, where,
                 "is that task running? raise runtime.rendezvous_timeout to wait longer", options.on_waiting,
                 options.cancelled);
    const ClientHandshake handshake(options.credentials, kProtocolMagic, options.task, options.role, where);
    const Message challenge = roundtrip(handshake.hello(), seconds(options.request_timeout));
    const Message proof = handshake.proof_for(challenge);
    if (options.prove_with_first_request) {
      proof_pending = PendingProof{handshake, proof};
      return;
    }
    welcome_number = handshake.check_welcome(roundtrip(proof, seconds(options.request_timeout)));
  }

  TimeoutError no_answer(const Message& m, Clock::duration timeout) const {
    return TimeoutError(str(where, " did not answer a '", op_name(m.op), "' request within ",
                            std::chrono::duration<double>(timeout).count(), " s"));
  }
  PeerLost lost(const std::error_code& error) const {
    return PeerLost(str("lost the connection to ", where, " (", error.message(), "): that task died or the network failed"));
  }

  // Reads one reply frame before `deadline`: the reply, or the error that ended
  // the read (asio::error::timed_out at the deadline).
  std::error_code read_reply(Clock::time_point deadline, Message& reply) {
    unsigned char header[4];
    std::string body;
    std::error_code error;
    bool done = false, too_big = false;
    asio::async_read(socket, asio::buffer(header), [&](const std::error_code& ec, size_t) {
      if (ec) {
        error = ec;
        done = true;
        return;
      }
      const uint32_t length = decode_length(header);
      if (length > kMaxFrameBytes) {
        too_big = done = true;
        return;
      }
      body.assign(length, '\0');
      asio::async_read(socket, asio::buffer(body), [&](const std::error_code& ec2, size_t) {
        error = ec2;
        done = true;
      });
    });
    if (!run_until(done, deadline - Clock::now())) return asio::error::timed_out;
    if (error) return error;
    if (too_big || !decode_payload(body, reply)) return asio::error::invalid_argument;
    return {};
  }

  // Sends `requests` in one write and reads their replies, all within `timeout`.
  // A pending proof goes first, and its welcome is checked.
  std::vector<Message> exchange(const std::vector<Message>& requests, Clock::duration timeout) {
    const auto deadline = Clock::now() + timeout;
    std::string out = proof_pending ? encode_frame(proof_pending->proof) : std::string();
    for (const auto& m : requests) out += encode_frame(m);
    std::error_code error;
    bool done = false;
    asio::async_write(socket, asio::buffer(out), [&](const std::error_code& ec, size_t) {
      error = ec;
      done = true;
    });
    if (!run_until(done, timeout)) throw no_answer(requests.front(), timeout);
    if (error) throw lost(error);
    if (proof_pending) {
      Message welcome;
      const std::error_code e = read_reply(deadline, welcome);
      if (e == asio::error::timed_out) throw no_answer(proof_pending->proof, timeout);
      if (e == asio::error::invalid_argument) throw PeerLost(str(where, " sent a malformed reply to this task's proof"));
      // A server that rejects a proof says so (check_welcome); one that hangs
      // up without a word is ending or died.
      if (e) throw PeerLost(str("lost the connection to ", where, " while it checked this task's proof of the job "
                                "secret (", e.message(), "): that task ended (the job may be over) or died"));
      welcome_number = proof_pending->handshake.check_welcome(welcome);
      proof_pending.reset();
    }
    std::vector<Message> replies(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::error_code e = read_reply(deadline, replies[i]);
      if (e == asio::error::timed_out) throw no_answer(requests[i], timeout);
      if (e == asio::error::invalid_argument) throw PeerLost(str(where, " sent a malformed reply"));
      if (e) throw lost(e);
    }
    return replies;
  }

  // Sends one message and reads the reply, within `timeout`.
  Message roundtrip(const Message& m, Clock::duration timeout) { return exchange({m}, timeout).front(); }

  // A reply whose kError means the job failed: throws.
  static const Message& checked(const Message& reply) {
    if (reply.op == Op::kError) throw PeerLost(reply_text(reply, "the job failed"));
    return reply;
  }

  // A request whose kError reply means the job failed.
  Message request(const Message& m, Clock::duration timeout) { return checked(roundtrip(m, timeout)); }
};

std::string local_address_toward(const std::string& host, int port, const std::string& what) {
  asio::io_context io;
  std::error_code ec;
  asio::ip::udp::resolver resolver(io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec || endpoints.empty())
    throw ConfigError(str(what, ": cannot resolve '", host, "': ", ec ? ec.message() : std::string("no address")));
  asio::ip::udp::socket socket(io);
  const asio::ip::udp::endpoint target = *endpoints.begin();
  socket.open(target.protocol(), ec);
  if (!ec) socket.connect(target, ec);
  if (ec) throw ConfigError(str(what, ": no route from this machine to ", host, ":", port, ": ", ec.message()));
  const asio::ip::address mine = socket.local_endpoint(ec).address();
  if (ec) throw ConfigError(str(what, ": cannot tell this machine's address toward ", host, ": ", ec.message()));
  return mine.is_v6() ? str("[", mine.to_string(), "]") : mine.to_string();
}

StoreClient::StoreClient(const std::string& host, int port, ClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->where = impl_->options.server_name.empty() ? str(host, ":", port) : impl_->options.server_name;
  impl_->connect(host, port);
}

StoreClient::~StoreClient() { sever(); }

void StoreClient::sever() {
  std::error_code ignored;
  impl_->socket.close(ignored);
}

void StoreClient::set(const std::string& key, const std::string& value) {
  impl_->request({Op::kSet, 0, {key, value}}, seconds(impl_->options.request_timeout));
}

std::optional<std::string> StoreClient::get(const std::string& key) {
  const Message r = impl_->request({Op::kGet, 0, {key}}, seconds(impl_->options.request_timeout));
  if (r.op == Op::kNotFound) return std::nullopt;
  return r.fields.empty() ? std::string() : r.fields[0];
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  return impl_->request({Op::kAdd, delta, {key}}, seconds(impl_->options.request_timeout)).number;
}

bool StoreClient::wait(const std::vector<std::string>& keys, double timeout_seconds) {
  const auto ms = static_cast<int64_t>(timeout_seconds * 1000.0);
  const Message r = impl_->request({Op::kWait, ms, keys}, seconds(timeout_seconds + impl_->options.request_timeout));
  return r.op == Op::kOk;
}

namespace {
// The values in a wait_get's kOk reply (get_many when they did not fit in it).
std::vector<std::string> waited_values(const Message& reply, const std::vector<std::string>& keys, Store& store) {
  if (reply.fields.size() == keys.size()) return reply.fields;
  std::vector<std::string> values;
  for (auto& v : store.get_many(keys)) values.push_back(v.value_or(""));
  return values;
}
}  // namespace

std::optional<std::vector<std::string>> StoreClient::wait_get(const std::vector<std::string>& keys,
                                                              double timeout_seconds) {
  const auto ms = static_cast<int64_t>(timeout_seconds * 1000.0);
  const Message r =
      impl_->request({Op::kWaitGet, ms, keys}, seconds(timeout_seconds + impl_->options.request_timeout));
  if (r.op != Op::kOk) return std::nullopt;
  return waited_values(r, keys, *this);
}

std::optional<std::vector<std::string>> StoreClient::set_then_wait_get(const std::string& key, const std::string& value,
                                                                       const std::vector<std::string>& keys,
                                                                       double timeout_seconds) {
  const auto ms = static_cast<int64_t>(timeout_seconds * 1000.0);
  const auto replies = impl_->exchange({{Op::kSet, 0, {key, value}}, {Op::kWaitGet, ms, keys}},
                                       seconds(timeout_seconds + 2 * impl_->options.request_timeout));
  Impl::checked(replies[0]);
  const Message& r = Impl::checked(replies[1]);
  if (r.op != Op::kOk) return std::nullopt;
  return waited_values(r, keys, *this);
}

int64_t StoreClient::incarnation() const { return impl_->welcome_number; }

std::vector<std::optional<std::string>> StoreClient::get_many(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> values;
  values.reserve(keys.size());
  // Requests of at most 1,024 keys (a request frame stays far below the limit);
  // the server answers as many as fit in its reply frame, and the rest is asked again.
  while (values.size() < keys.size()) {
    const size_t first = values.size();
    const size_t count = std::min<size_t>(1024, keys.size() - first);
    const std::vector<std::string> part(keys.begin() + static_cast<long>(first),
                                        keys.begin() + static_cast<long>(first + count));
    const Message r = impl_->request({Op::kGetMany, 0, part}, seconds(impl_->options.request_timeout));
    if (r.op != Op::kValue || r.number < 1 || static_cast<size_t>(r.number) > count ||
        r.fields.size() != static_cast<size_t>(r.number))
      throw PeerLost(str(impl_->where, " sent a malformed get_many reply"));
    for (const auto& f : r.fields) values.push_back(f.empty() ? std::nullopt : std::optional<std::string>(f.substr(1)));
  }
  return values;
}

HeartbeatReply StoreClient::heartbeat(int64_t step) {
  const Message r = impl_->roundtrip({Op::kHeartbeat, step, {}}, seconds(impl_->options.request_timeout));
  HeartbeatReply reply;
  if (r.op == Op::kStatus && r.number == 0) {
    if (!r.fields.empty()) reply.chief_step = std::strtoll(r.fields[0].c_str(), nullptr, 10);
    if (r.fields.size() > 1) reply.report_generation = std::strtoll(r.fields[1].c_str(), nullptr, 10);
    if (r.fields.size() > 2) reply.membership = std::strtoll(r.fields[2].c_str(), nullptr, 10);
  } else {
    reply.failure = reply_text(r, "the job failed");
  }
  return reply;
}

void StoreClient::done() { impl_->request({Op::kDone, 0, {}}, seconds(impl_->options.request_timeout)); }

trace::ClockOffset StoreClient::clock_offset(int samples) {
  int64_t best_round_trip = -1, offset = 0;
  for (int i = 0; i < samples; ++i) {
    const int64_t sent = trace::now_us();
    const Message r = impl_->request({Op::kClock, 0, {}}, seconds(impl_->options.request_timeout));
    const int64_t received = trace::now_us();
    if (best_round_trip < 0 || received - sent < best_round_trip) {
      best_round_trip = received - sent;
      offset = r.number - (sent + received) / 2;
    }
  }
  // The server read its clock somewhere in the round trip; +1 for the
  // microsecond truncation of the three readings.
  return {offset, best_round_trip / 2 + 1};
}

void StoreClient::fail(const std::string& message) {
  impl_->roundtrip({Op::kFail, 0, {message}}, seconds(impl_->options.request_timeout));
}

}  // namespace dtrain::rendezvous
