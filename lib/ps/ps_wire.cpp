// Implementation of ps_wire.h.
#include "ps/ps_wire.h"

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

}  // namespace dtrain::ps
