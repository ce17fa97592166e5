// The rendezvous wire format: length-prefixed frames carrying one Message each.
//
//   frame   = u32 payload length (big-endian) | payload
//   payload = u8 op | i64 number (big-endian) | u32 field count | fields
//   field   = u32 length | bytes
//
// A frame longer than the receiver's limit, or a payload that does not decode
// exactly, is a protocol error: the connection is dropped. No Asio here, so the
// format is testable on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::rendezvous {

// Largest payload either side accepts (store values are hashes and addresses).
constexpr uint32_t kMaxFrameBytes = 1 << 20;

enum class Op : uint8_t {
  // handshake
  kHello = 1,      // client: fields {magic, job_id, task, role, client_nonce}
  kChallenge = 2,  // server: fields {server_nonce, server_proof}
  kProof = 3,      // client: fields {client_proof}
  kWelcome = 4,    // server: handshake accepted
  // requests (client -> server)
  kSet = 10,        // {key, value}
  kGet = 11,        // {key}
  kAdd = 12,        // {key}, number = delta
  kWait = 13,       // {keys...}, number = timeout in ms
  kHeartbeat = 14,  // number = last step reached
  kDone = 15,       // the task is finishing normally: its disconnect is not a loss
  kFail = 16,       // {message}: the task is failing; the job fails with it
  kClock = 17,      // the server's wall clock: a kValue reply, number = microseconds since the Unix epoch
  kGetMany = 18,    // {keys...}: a kValue reply, one field per key answered ("\x01" + value, or "" when
                    // absent), number = how many: the first keys, as many as fit in one frame
  kWaitGet = 19,    // {keys...}, number = timeout in ms: a wait whose kOk reply carries the keys' values,
                    // one field each, when they fit in one frame (no fields when they do not: get them)
  // replies (server -> client)
  kOk = 30,
  kValue = 31,      // {value} or number
  kNotFound = 32,
  kTimedOut = 33,
  kStatus = 34,     // heartbeat reply: number 0 = job healthy, 1 = failed; {message}
  kError = 35,      // {message}; the server closes the connection after it. number: kJobFailed
};

const char* op_name(Op op);

// kError's number: why the job failed.
inline constexpr int64_t kJobFailed = 0;         // a task failed or was lost

// A piece of bytes to write, gathered with others into one write (no copy).
struct ConstBytes {
  const void* data = nullptr;
  size_t size = 0;
};

struct Message {
  Op op = Op::kOk;
  int64_t number = 0;
  std::vector<std::string> fields;
};

// The whole frame (length prefix included).
std::string encode_frame(const Message& message);

// Reads the big-endian length prefix of a frame (4 bytes).
uint32_t decode_length(const unsigned char header[4]);

// Decodes a payload (without its length prefix). Returns false if it is malformed.
bool decode_payload(const std::string& payload, Message& out);

// What the store server makes of a request after the handshake (store_server.cpp;
// here, without Asio, so that it is testable and fuzzed on its own).

// Why a request is malformed ("" when it can be served): an op that is not a request
// (a handshake op or a reply), or the wrong fields for its op: set {key, value}, get
// and add {key}, fail {message} or {}; wait and get_many take any number of keys, and heartbeat,
// done and clock ignore their fields.
std::string request_problem(const Message& m);

// A counter after an add request: `held` (the key's value, "" = 0, else decimal
// digits with an optional '-') plus `delta`; nullopt when `held` is not such a number
// or the sum does not fit in 64 bits.
std::optional<int64_t> counter_after_add(const std::string& held, int64_t delta);

// The longest wait a request may ask for (a week); a wait request's number is
// clamped to 0 .. kMaxWaitMs.
constexpr int64_t kMaxWaitMs = int64_t{7} * 24 * 3600 * 1000;
int64_t wait_timeout_ms(const Message& m);

// The longest text taken from a peer's message (an error or failure message).
constexpr size_t kMaxPeerText = 4096;

// A reply's first field as message text (escaped, cut at kMaxPeerText), or
// `fallback` when the reply has no field.
std::string reply_text(const Message& m, const std::string& fallback);

}  // namespace dtrain::rendezvous
