// The rendezvous wire format: round trips and rejection of malformed payloads.
#include <catch2/catch.hpp>

#include "rendezvous/wire.h"

using namespace dtrain::rendezvous;

TEST_CASE("messages survive encoding and decoding, binary fields included") {
  Message m{Op::kWait, -1234567890123, {"join/worker:0", std::string("\0\xff\x01", 3), ""}};
  const std::string frame = encode_frame(m);
  REQUIRE(decode_length(reinterpret_cast<const unsigned char*>(frame.data())) == frame.size() - 4);
  Message out;
  REQUIRE(decode_payload(frame.substr(4), out));
  CHECK(out.op == Op::kWait);
  CHECK(out.number == -1234567890123);
  CHECK(out.fields == m.fields);
}

TEST_CASE("truncated, padded or nonsense payloads are rejected") {
  const std::string payload = encode_frame({Op::kSet, 0, {"key", "value"}}).substr(4);
  Message out;
  CHECK_FALSE(decode_payload(payload.substr(0, payload.size() - 1), out));  // truncated
  CHECK_FALSE(decode_payload(payload + "x", out));                          // trailing byte
  CHECK_FALSE(decode_payload("", out));
  std::string bad_op = payload;
  bad_op[0] = 99;
  CHECK_FALSE(decode_payload(bad_op, out));
  // A field count far beyond the bytes present must not allocate or read past the end.
  std::string huge = payload.substr(0, 9) + std::string("\x7f\xff\xff\xff", 4);
  CHECK_FALSE(decode_payload(huge, out));
}
