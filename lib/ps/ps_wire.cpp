// Implementation of ps_wire.h.
#include "ps/ps_wire.h"

#include <cstring>

#include "core/strings.h"

namespace dtrain::ps {

const char* ps_op_name(uint32_t op) {
  switch (static_cast<PsOp>(op)) {
    case PsOp::kPull: return "pull";
    case PsOp::kPushPull: return "push";
    case PsOp::kFetch: return "fetch";
    case PsOp::kAssign: return "assign";
    case PsOp::kStats: return "stats";
    case PsOp::kBye: return "bye";
    case PsOp::kSave: return "save";
    case PsOp::kValues: return "values";
    case PsOp::kState: return "state";
    case PsOp::kOk: return "ok";
    case PsOp::kError: return "error";
    case PsOp::kSaved: return "saved";
  }
  return "unknown";
}

PsHeader decode_ps_header(const unsigned char bytes[sizeof(PsHeader)]) {
  PsHeader h;
  std::memcpy(&h, bytes, sizeof h);
  return h;
}

std::string request_header_problem(const PsHeader& h, const PsLimits& limits) {
  uint64_t limit = 0;
  switch (static_cast<PsOp>(h.op)) {
    case PsOp::kPushPull: limit = limits.push_bytes; break;
    case PsOp::kAssign: limit = limits.assign_bytes; break;
    case PsOp::kSave: limit = kMaxSaveNameBytes; break;
    case PsOp::kPull:
    case PsOp::kFetch:
    case PsOp::kStats:
    case PsOp::kBye: break;
    default: return str("sent an unknown request (op ", h.op, ")");
  }
  if (h.payload_bytes > limit)
    return str("sent a ", ps_op_name(h.op), " request with ", h.payload_bytes, " payload bytes (at most ", limit,
               " here)");
  return "";
}

std::string save_name_problem(const std::string& name) {
  if (name.rfind(".tmp-ckpt-", 0) != 0 || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos)
    return str("asked to save into '", printable(name), "', which is not a checkpoint's temporary directory");
  return "";
}

std::string reply_header_problem(const PsHeader& h, PsOp expected, uint64_t bytes) {
  if (h.op == static_cast<uint32_t>(expected) && h.payload_bytes == bytes) return "";
  return str("sent a '", ps_op_name(h.op), "' reply of ", h.payload_bytes, " bytes where '",
             ps_op_name(static_cast<uint32_t>(expected)), "' of ", bytes, " was due");
}

std::string error_reply_text(std::string_view payload) { return printable(payload, kMaxErrorBytes); }

}  // namespace dtrain::ps
