// Feeds: the bytes a peer sends on a parameter-server connection: one handshake
// frame (rendezvous framing, read as the ps's hello), then requests, each a 32-byte
// header (op, reserved, a, b, payload bytes) and its payload; every header is also
// read as a reply, as the ps client reads replies, and every payload as an error text.
// Asserts: read_hello() with the ps magic, request_header_problem() (for a ps of
// 3 and 8 floats), save_name_problem(), reply_header_problem() and
// error_reply_text() hold no undefined behaviour and every text they give is
// printable; no payload over the header's limit is read.
#include <algorithm>
#include <cstring>

#include "fuzz_support.h"
#include "ps/ps_wire.h"
#include "rendezvous/auth.h"

using namespace dtrain;
using namespace dtrain::ps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t at = 0;
  if (size >= 4) {
    const uint32_t length = rendezvous::decode_length(data);
    at = 4 + std::min<size_t>(length, size - 4);
    rendezvous::Message m;
    rendezvous::Hello hello;
    if (length <= 4096 && rendezvous::decode_payload(std::string(reinterpret_cast<const char*>(data + 4), at - 4), m))
      fuzz::check_message(rendezvous::read_hello(m, kPsProtocolMagic, &hello));
  }
  const PsLimits limits{3 * 4, 8 * 4};
  while (at + sizeof(PsHeader) <= size) {
    const PsHeader h = decode_ps_header(data + at);
    at += sizeof(PsHeader);
    fuzz::check_message(ps_op_name(h.op));
    for (PsOp expected : {PsOp::kValues, PsOp::kState, PsOp::kOk, PsOp::kSaved})
      fuzz::check_message(reply_header_problem(h, expected, 12));
    const std::string why = request_header_problem(h, limits);
    fuzz::check_message(why);
    const size_t take = std::min<uint64_t>(h.payload_bytes, size - at);
    const std::string payload(reinterpret_cast<const char*>(data + at), take);
    fuzz::check_message(error_reply_text(payload));
    if (!why.empty()) break;  // the server drops the connection
    if (h.payload_bytes > std::max({limits.push_bytes, limits.assign_bytes, kMaxSaveNameBytes}))
      fuzz::fuzz_fail("a request header over every limit was accepted", std::to_string(h.payload_bytes));
    if (h.op == static_cast<uint32_t>(PsOp::kSave)) fuzz::check_message(save_name_problem(payload));
    at += take;
  }
  return 0;
}
