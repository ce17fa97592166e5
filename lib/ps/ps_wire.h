// The parameter-server wire format, after the handshake (which is the
// rendezvous's: rendezvous/wire.h frames and the HMAC challenge-response of
// rendezvous/auth.h, with its own magic, so only tasks of this job get in).
//
//   request / reply = header (32 bytes, little-endian) | payload
//   header          = u32 op | u32 reserved | i64 a | i64 b | u64 payload bytes
//
// Payloads are raw little-endian float32 (values, gradients, optimizer slots in
// the placement's shard order) or UTF-8 text (an error message). Each side
// bounds the payload it accepts by what the op can carry for this ps; anything
// else drops the connection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtrain::ps {

inline constexpr const char* kPsProtocolMagic = "dtrain-ps-1";

enum class PsOp : uint32_t {
  // requests
  kPull = 1,      // reply kValues: a = version
  kPushPull = 2,  // payload: gradients (deltas for non-trainable shards); a = the worker's step count;
                  // reply kValues once the push is applied (sync: its round; stale: within the bound)
  kFetch = 3,     // reply kState: values then optimizer slots; a = version
  kAssign = 4,    // payload: a state as kFetch gives it; a = version to continue from; reply kOk
  kStats = 5,     // reply kOk: a = version (updates applied), b = pushes received
  kBye = 6,       // a worker leaves or pauses (no work now): its pushes stop counting until its next; reply kOk
  kSave = 7,      // payload: the name of the checkpoint's temporary directory (".tmp-ckpt-...", under the ps's
                  // checkpoint directory); a = the step; the ps writes its shards there (ps_checkpoint.h);
                  // reply kSaved
  // replies
  kValues = 20,
  kState = 21,
  kOk = 22,
  kError = 23,  // payload: message; the server closes the connection after it
  kSaved = 24,  // a = version, b = the file's bytes; payload: its SHA-256 (64 hex digits)
};

struct PsHeader {
  uint32_t op = 0;
  uint32_t reserved = 0;
  int64_t a = 0;
  int64_t b = 0;
  uint64_t payload_bytes = 0;
};
static_assert(sizeof(PsHeader) == 32, "the header is 32 bytes on the wire");

// This is a little-endian build (x86-64, aarch64): the header and float payloads
// are copied as they are in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "dtrain's ps protocol assumes a little-endian host");

const char* ps_op_name(uint32_t op);

// A header as it arrives: the 32 bytes copied as they are (this host is little-endian).
PsHeader decode_ps_header(const unsigned char bytes[sizeof(PsHeader)]);

// What a ps serves: the payload bytes a push and an assign carry (its shards' sizes).
struct PsLimits {
  uint64_t push_bytes = 0;
  uint64_t assign_bytes = 0;
};
// The longest name a save request carries (a directory name).
constexpr uint64_t kMaxSaveNameBytes = 255;

// Why the server refuses a request header before reading its payload ("" = read the
// payload): an op that is not a request, or more payload bytes than the op carries
// here (push, assign: `limits`; save: kMaxSaveNameBytes; the others: none). The
// reason follows "it " in the server's log.
std::string request_header_problem(const PsHeader& h, const PsLimits& limits);

// Why a save request's payload does not name a checkpoint's temporary directory
// (".tmp-ckpt-...", one path component), "" when it does; quotes the name escaped.
std::string save_name_problem(const std::string& name);

// Why a reply header is not the reply due (`expected` with `bytes` of payload), ""
// when it is: for the client's CommError.
std::string reply_header_problem(const PsHeader& h, PsOp expected, uint64_t bytes);

// The longest error text a client reads from an error reply.
constexpr uint64_t kMaxErrorBytes = 4096;
// An error reply's payload as message text: escaped, cut short.
std::string error_reply_text(std::string_view payload);

}  // namespace dtrain::ps
