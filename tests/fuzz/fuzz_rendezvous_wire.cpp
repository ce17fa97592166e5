// Feeds: the bytes a peer sends on a rendezvous connection: frames (a 4-byte
// big-endian length, then the payload: op, number, fields), read as the chief's
// store server reads them: the first frame as the hello, the second as the proof
// (both before authentication), the rest as requests of an authenticated task;
// every frame is also read as a reply, as the store client reads replies.
// Asserts: decode_payload() stops at its bounds and what it accepts encodes back to
// the same bytes; read_hello(), proof_accepted(), request_problem(),
// counter_after_add(), wait_timeout_ms() and reply_text() hold no undefined
// behaviour (UBSan) and every text they give, which the server logs or replies, is
// printable.
#include <chrono>
#include <map>

#include "fuzz_support.h"
#include "rendezvous/auth.h"
#include "rendezvous/wire.h"

using namespace dtrain;
using namespace dtrain::rendezvous;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Credentials creds{"job-fuzz", "secret"};
  std::map<std::string, std::string> kv;
  Hello hello;
  size_t at = 0;
  for (int frame = 0; at + 4 <= size; ++frame) {
    const uint32_t length = decode_length(data + at);
    at += 4;
    if (length > kMaxFrameBytes || length > size - at) break;  // the server drops the connection
    const std::string payload(reinterpret_cast<const char*>(data + at), length);
    at += length;
    Message m;
    if (!decode_payload(payload, m)) continue;
    if (encode_frame(m).substr(4) != payload) fuzz::fuzz_fail("a decoded payload does not encode back", payload);
    fuzz::check_message(reply_text(m, ""));
    if (frame == 0) {
      fuzz::check_message(read_hello(m, kProtocolMagic, &hello));
      fuzz::check_message(other_job_text(hello, creds));
      continue;
    }
    if (frame == 1) {
      proof_accepted(m, creds, hello, "server-nonce");
      continue;
    }
    const std::string why = request_problem(m);
    fuzz::check_message(why);
    if (!why.empty()) continue;
    if (m.op == Op::kSet) kv[m.fields[0]] = m.fields[1];
    if (m.op == Op::kAdd) {
      const auto now = counter_after_add(kv[m.fields[0]], m.number);
      if (now) kv[m.fields[0]] = std::to_string(*now);
    }
    if (m.op == Op::kWait) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_timeout_ms(m));
      (void)deadline;
    }
  }
  return 0;
}
