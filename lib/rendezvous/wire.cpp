// Implementation of wire.h.
#include "rendezvous/wire.h"

#include <algorithm>
#include <charconv>

#include "core/strings.h"

namespace dtrain::rendezvous {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}

void put_u64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}

// A bounds-checked reader over a payload.
class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  bool u8(uint8_t& v) {
    if (left() < 1) return false;
    v = static_cast<uint8_t>(data_[pos_++]);
    return true;
  }
  bool u32(uint32_t& v) {
    if (left() < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(data_[pos_++]);
    return true;
  }
  bool u64(uint64_t& v) {
    if (left() < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(data_[pos_++]);
    return true;
  }
  bool bytes(size_t n, std::string& v) {
    if (left() < n) return false;
    v = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  size_t left() const { return data_.size() - pos_; }

 private:
  const std::string& data_;
  size_t pos_ = 0;
};

bool known_op(uint8_t op) {
  return (op >= 1 && op <= 4) || (op >= 10 && op <= 19) || (op >= 30 && op <= 35);
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kHello: return "hello";
    case Op::kChallenge: return "challenge";
    case Op::kProof: return "proof";
    case Op::kWelcome: return "welcome";
    case Op::kSet: return "set";
    case Op::kGet: return "get";
    case Op::kAdd: return "add";
    case Op::kWait: return "wait";
    case Op::kHeartbeat: return "heartbeat";
    case Op::kDone: return "done";
    case Op::kFail: return "fail";
    case Op::kClock: return "clock";
    case Op::kGetMany: return "get_many";
    case Op::kWaitGet: return "wait_get";
    case Op::kOk: return "ok";
    case Op::kValue: return "value";
    case Op::kNotFound: return "not-found";
    case Op::kTimedOut: return "timed-out";
    case Op::kStatus: return "status";
    case Op::kError: return "error";
  }
  return "unknown";
}

std::string encode_frame(const Message& m) {
  std::string payload;
  payload.push_back(static_cast<char>(m.op));
  put_u64(payload, static_cast<uint64_t>(m.number));
  put_u32(payload, static_cast<uint32_t>(m.fields.size()));
  for (const auto& f : m.fields) {
    put_u32(payload, static_cast<uint32_t>(f.size()));
    payload += f;
  }
  std::string frame;
  put_u32(frame, static_cast<uint32_t>(payload.size()));
  return frame + payload;
}

uint32_t decode_length(const unsigned char header[4]) {
  return (uint32_t{header[0]} << 24) | (uint32_t{header[1]} << 16) | (uint32_t{header[2]} << 8) |
         uint32_t{header[3]};
}

bool decode_payload(const std::string& payload, Message& out) {
  Reader r(payload);
  uint8_t op = 0;
  uint64_t number = 0;
  uint32_t count = 0;
  if (!r.u8(op) || !known_op(op) || !r.u64(number) || !r.u32(count)) return false;
  if (count > r.left() / 4) return false;  // each field needs at least its length
  out.op = static_cast<Op>(op);
  out.number = static_cast<int64_t>(number);
  out.fields.assign(count, std::string());
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t length = 0;
    if (!r.u32(length) || !r.bytes(length, out.fields[i])) return false;
  }
  return r.left() == 0;
}

std::string request_problem(const Message& m) {
  const size_t n = m.fields.size();
  const auto fields = [&](const char* what) { return str("sent a malformed ", op_name(m.op), " (", n, " fields; ", what, ")"); };
  switch (m.op) {
    case Op::kSet: return n == 2 ? "" : fields("expected a key and a value");
    case Op::kGet:
    case Op::kAdd: return n == 1 ? "" : fields("expected a key");
    case Op::kFail: return n <= 1 ? "" : fields("expected a message");
    case Op::kWait:
    case Op::kWaitGet:
    case Op::kGetMany:
    case Op::kHeartbeat:
    case Op::kDone:
    case Op::kClock: return "";
    default: return str("sent an unexpected '", op_name(m.op), "' request");
  }
}

std::optional<int64_t> counter_after_add(const std::string& held, int64_t delta) {
  int64_t current = 0;
  if (!held.empty()) {
    const char* end = held.data() + held.size();
    const auto [at, error] = std::from_chars(held.data(), end, current);
    if (error != std::errc() || at != end) return std::nullopt;
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) return std::nullopt;
  return sum;
}

int64_t wait_timeout_ms(const Message& m) { return std::clamp<int64_t>(m.number, 0, kMaxWaitMs); }

std::string reply_text(const Message& m, const std::string& fallback) {
  return m.fields.empty() ? fallback : printable(m.fields[0], kMaxPeerText);
}

}  // namespace dtrain::rendezvous
