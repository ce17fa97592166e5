// Implementation of ps_client.h: blocking calls made of Asio's asynchronous
// operations and io_context::run_one_until(), which puts a deadline on them.
#include "ps/ps_client.h"

#include <asio.hpp>
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "ps/ps_checkpoint.h"
#include "rendezvous/deadline_socket.h"
#include "rendezvous/wire.h"

namespace dtrain::ps {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using rendezvous::Message;
using rendezvous::Op;

namespace {
Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

struct PsChannel::Impl {
  PsClientOptions options;
  std::string name;
  rendezvous::DeadlineSocket link;
  tcp::socket& socket = link.socket;

  bool run_until(const bool& done, Clock::duration timeout) { return link.run_until(done, timeout); }

  [[noreturn]] void fail(const std::error_code& ec, const char* doing) {
    if (ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
        ec == asio::error::bad_descriptor)
      throw PeerLost(str(name, " closed the connection while ", doing, " (the ps task died or was killed)"));
    throw CommError(str(doing, " ", name, ": ", ec.message()));
  }

  void write_all(const std::vector<asio::const_buffer>& buffers, const char* doing) {
    bool done = false;
    std::error_code error;
    asio::async_write(socket, buffers, [&](const std::error_code& ec, size_t) {
      error = ec;
      done = true;
    });
    if (!run_until(done, seconds(options.request_timeout)))
      throw TimeoutError(str(name, " took more than ", options.request_timeout, " s to take a request (", doing, ")"));
    if (error) fail(error, doing);
  }

  void read_all(void* into, size_t bytes, const char* doing) {
    bool done = false;
    std::error_code error;
    asio::async_read(socket, asio::buffer(into, bytes), [&](const std::error_code& ec, size_t) {
      error = ec;
      done = true;
    });
    if (!run_until(done, seconds(options.request_timeout)))
      throw TimeoutError(str(name, " did not answer within ", options.request_timeout, " s (", doing,
                             "); is it overloaded or cut off?"));
    if (error) fail(error, doing);
  }

  Message handshake_roundtrip(const Message& m) {
    const std::string frame = rendezvous::encode_frame(m);
    write_all({asio::buffer(frame)}, "the handshake with");
    unsigned char header[4];
    read_all(header, 4, "the handshake with");
    const uint32_t length = rendezvous::decode_length(header);
    if (length > 4096) throw ConfigError(str(name, " is not a dtrain ps of this version"));
    std::string body(length, '\0');
    read_all(body.data(), length, "the handshake with");
    Message reply;
    if (!rendezvous::decode_payload(body, reply)) throw ConfigError(str(name, " is not a dtrain ps of this version"));
    return reply;
  }

  void connect(const std::string& address) {
    const size_t colon = address.rfind(':');
    link.connect(address.substr(0, colon), address.substr(colon + 1), options.connect_timeout, name,
                 "is that ps task running? raise runtime.rendezvous_timeout to wait longer");
    rendezvous::client_handshake([this](const Message& m) { return handshake_roundtrip(m); }, options.credentials,
                                 kPsProtocolMagic, options.task, "ps", name);
  }
};

PsChannel::PsChannel(const std::string& address, const std::string& name, const PsClientOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->name = name;
  impl_->connect(address);
}

PsChannel::~PsChannel() = default;

void PsChannel::send(PsOp op, int64_t a, const void* payload, size_t bytes) {
  const PsHeader header{static_cast<uint32_t>(op), 0, a, 0, bytes};
  impl_->write_all({asio::buffer(&header, sizeof header), asio::buffer(payload, bytes)}, "sending a request to");
}

PsHeader PsChannel::receive(PsOp expected, void* into, size_t bytes) {
  PsHeader header;
  impl_->read_all(&header, sizeof header, "waiting for a reply from");
  if (header.op == static_cast<uint32_t>(PsOp::kError)) {
    std::string message(std::min<uint64_t>(header.payload_bytes, kMaxErrorBytes), '\0');
    impl_->read_all(message.data(), message.size(), "reading an error from");
    throw RuntimeError(str(impl_->name, " refused a request: ", error_reply_text(message)));
  }
  if (const std::string why = reply_header_problem(header, expected, bytes); !why.empty())
    throw CommError(str(impl_->name, " ", why, ": is it the same dtrain version and job?"));
  if (bytes) impl_->read_all(into, bytes, "reading a reply from");
  return header;
}

PsGroup::PsGroup(Placement placement, const std::vector<std::string>& addresses, const PsClientOptions& options)
    : placement_(std::move(placement)) {
  for (size_t p = 0; p < addresses.size(); ++p)
    channels_.push_back(std::make_unique<PsChannel>(addresses[p], str("ps:", p, " at ", addresses[p]), options));
}

PsGroup::~PsGroup() = default;

void PsGroup::start_pull() {
  for (auto& c : channels_) c->send(PsOp::kPull, 0, nullptr, 0);
  pending_ = true;
}

void PsGroup::start_push(const std::vector<std::vector<float>>& payloads, int64_t clock) {
  for (size_t p = 0; p < channels_.size(); ++p)
    channels_[p]->send(PsOp::kPushPull, clock, payloads[p].data(), payloads[p].size() * sizeof(float));
  pending_ = true;
}

int64_t PsGroup::finish(std::vector<std::vector<float>>& values) {
  values.resize(channels_.size());
  int64_t version = INT64_MAX;
  for (size_t p = 0; p < channels_.size(); ++p) {
    values[p].resize(static_cast<size_t>(placement_.ps_elements(static_cast<int>(p))));
    version = std::min(version, channels_[p]->receive(PsOp::kValues, values[p].data(), values[p].size() * 4).a);
  }
  pending_ = false;
  return version;
}

int64_t PsGroup::fetch_state(std::vector<std::vector<float>>& states) {
  int64_t version = INT64_MAX;
  for (auto& c : channels_) c->send(PsOp::kFetch, 0, nullptr, 0);
  for (size_t p = 0; p < channels_.size(); ++p) {
    // The state's size is the ps's business (its optimizer's slots): read the header first.
    version = std::min(version, channels_[p]->receive(PsOp::kState, states[p].data(), states[p].size() * 4).a);
  }
  return version;
}

void PsGroup::assign_state(const std::vector<std::vector<float>>& states, int64_t version) {
  for (size_t p = 0; p < channels_.size(); ++p)
    channels_[p]->send(PsOp::kAssign, version, states[p].data(), states[p].size() * sizeof(float));
  for (auto& c : channels_) c->receive(PsOp::kOk, nullptr, 0);
}

std::map<std::string, checkpoint::FileDigest> PsGroup::save(const std::string& tmp_dir, int64_t step) {
  const std::string name = std::filesystem::path(tmp_dir).filename().string();
  for (auto& c : channels_) c->send(PsOp::kSave, step, name.data(), name.size());
  std::map<std::string, checkpoint::FileDigest> files;
  for (size_t p = 0; p < channels_.size(); ++p) {
    checkpoint::FileDigest d;
    d.sha256.resize(64);
    try {
      d.bytes = static_cast<uint64_t>(channels_[p]->receive(PsOp::kSaved, d.sha256.data(), d.sha256.size()).b);
    } catch (const RuntimeError& e) {  // the ps refused: it could not write the file
      throw IoError(str("checkpoint: ", e.what()));
    }
    files[shard_file_name(static_cast<int>(p), size())] = d;
  }
  return files;
}

std::pair<int64_t, int64_t> PsGroup::stats() {
  channels_[0]->send(PsOp::kStats, 0, nullptr, 0);
  const PsHeader h = channels_[0]->receive(PsOp::kOk, nullptr, 0);
  return {h.a, h.b};
}

void PsGroup::bye() {
  for (auto& c : channels_) c->send(PsOp::kBye, 0, nullptr, 0);
  for (auto& c : channels_) c->receive(PsOp::kOk, nullptr, 0);
}

}  // namespace dtrain::ps
