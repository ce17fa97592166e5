// The rendezvous wire format: round trips and rejection of malformed payloads.
#include <catch2/catch.hpp>

#include <cstdint>

#include "rendezvous/auth.h"
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

// tests/fuzz/fuzz_rendezvous_wire.cpp feeds these the messages a peer sends.
TEST_CASE("requests with the wrong fields for their op are malformed") {
  CHECK(request_problem({Op::kSet, 0, {"k", "v"}}).empty());
  CHECK(request_problem({Op::kWait, 5, {}}).empty());
  CHECK(request_problem({Op::kFail, 0, {}}).empty());
  CHECK(request_problem({Op::kGetMany, 0, {"a", "b", "c"}}).empty());
  Message decoded;
  REQUIRE(decode_payload(encode_frame({Op::kGetMany, 0, {"a", "b"}}).substr(4), decoded));
  CHECK(decoded.op == Op::kGetMany);
  CHECK(op_name(Op::kGetMany) == std::string("get_many"));
  CHECK(request_problem({Op::kWaitGet, 5, {"roster"}}).empty());
  REQUIRE(decode_payload(encode_frame({Op::kWaitGet, 5, {"a"}}).substr(4), decoded));
  CHECK(decoded.op == Op::kWaitGet);
  CHECK(op_name(Op::kWaitGet) == std::string("wait_get"));
  CHECK(request_problem({Op::kSet, 0, {"k"}}) == "sent a malformed set (1 fields; expected a key and a value)");
  CHECK(request_problem({Op::kAdd, 0, {}}) == "sent a malformed add (0 fields; expected a key)");
  CHECK(request_problem({Op::kFail, 0, {"a", "b"}}) == "sent a malformed fail (2 fields; expected a message)");
  CHECK(request_problem({Op::kWelcome, 0, {}}) == "sent an unexpected 'welcome' request");
  CHECK(request_problem({Op::kValue, 0, {}}) == "sent an unexpected 'value' request");
}

// The server added a request's delta with signed overflow (undefined behaviour),
// and counted incarnation/<task> with std::stoll, which threw on its I/O thread
// (std::terminate: the chief died) when a task had set the key to text.
TEST_CASE("a counter add that overflows, or a value that is no number, gives no counter") {
  CHECK(counter_after_add("", 5) == 5);
  CHECK(counter_after_add("-7", 2) == -5);
  CHECK(counter_after_add("9223372036854775806", 1) == INT64_MAX);
  CHECK_FALSE(counter_after_add("9223372036854775807", 1).has_value());
  CHECK_FALSE(counter_after_add("-9223372036854775808", -1).has_value());
  CHECK_FALSE(counter_after_add("99999999999999999999", 0).has_value());
  for (const char* text : {"abc", "12abc", " 12", "+3", "1.5", "-"})
    CHECK_FALSE(counter_after_add(text, 1).has_value());
  CHECK_FALSE(counter_after_add(std::string("1\0" "2", 3), 1).has_value());
}

// now + milliseconds(INT64_MAX) overflowed the steady clock (undefined behaviour).
TEST_CASE("a wait's timeout is clamped to 0 .. a week") {
  CHECK(wait_timeout_ms({Op::kWait, 1500, {}}) == 1500);
  CHECK(wait_timeout_ms({Op::kWait, -1, {}}) == 0);
  CHECK(wait_timeout_ms({Op::kWait, INT64_MAX, {}}) == kMaxWaitMs);
}

TEST_CASE("text a peer sends is escaped and cut short before it is shown") {
  CHECK(reply_text({Op::kError, 0, {}}, "the job failed") == "the job failed");
  CHECK(reply_text({Op::kError, 0, {"lost\x1b[2J\xff"}}, "") == "lost\\x1b[2J\\xff");
  CHECK(reply_text({Op::kError, 0, {std::string(10000, 'x')}}, "").size() == kMaxPeerText + 3);
  Hello hello;
  CHECK(read_hello({Op::kHello, 0, {kProtocolMagic, "job\n1", "worker:0", "store", "n"}}, kProtocolMagic, &hello).empty());
  CHECK(hello.task == "worker:0");
  CHECK(other_job_text(hello, {"job-2", "s"}) == "belongs to job 'job\\n1', this is job 'job-2'");
  CHECK(read_hello({Op::kHello, 0, {kProtocolMagic, "j", "t", "r", ""}}, kProtocolMagic, &hello) == "sent an empty nonce");
  CHECK(read_hello({Op::kHello, 0, {"other", "j", "t", "r", "n"}}, kProtocolMagic, &hello) ==
        "is not a dtrain task of this version (no dtrain-rendezvous-1 hello)");
  CHECK_FALSE(proof_accepted({Op::kProof, 0, {"x"}}, {"j", "s"}, hello, "sn"));
}

