// Implementation of ps_client.h: blocking calls with deadlines on the
// transport's DeadlineSocket (rendezvous/deadline_socket.h).
#include "ps/ps_client.h"

#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "ps/ps_checkpoint.h"
#include "rendezvous/deadline_socket.h"
#include "rendezvous/wire.h"

namespace dtrain::ps {

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

  // A transfer's end as dtrain's errors: the peer gone is PeerLost, the deadline a TimeoutError.
  void check(rendezvous::Transfer t, const std::string& error, const char* doing, const std::string& timeout_text) {
    switch (t) {
      case rendezvous::Transfer::kDone: return;
      case rendezvous::Transfer::kTimedOut: throw TimeoutError(timeout_text);
      case rendezvous::Transfer::kClosed:
        throw PeerLost(str(name, " closed the connection while ", doing, " (the ps task died or was killed)"));
      case rendezvous::Transfer::kFailed: throw CommError(str(doing, " ", name, ": ", error));
    }
  }

  void write_all(const std::vector<rendezvous::ConstBytes>& pieces, const char* doing) {
    std::string error;
    const rendezvous::Transfer t = link.write_all(pieces, seconds(options.request_timeout), &error);
    check(t, error, doing,
          str(name, " took more than ", options.request_timeout, " s to take a request (", doing, ")"));
  }

  void read_all(void* into, size_t bytes, const char* doing) {
    std::string error;
    const rendezvous::Transfer t = link.read_exact(into, bytes, seconds(options.request_timeout), &error);
    check(t, error, doing,
          str(name, " did not answer within ", options.request_timeout, " s (", doing,
              "); is it overloaded or cut off?"));
  }

  Message handshake_roundtrip(const Message& m) {
    const std::string frame = rendezvous::encode_frame(m);
    write_all({{frame.data(), frame.size()}}, "the handshake with");
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
  impl_->write_all({{&header, sizeof header}, {payload, bytes}}, "sending a request to");
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
