#include "runtime/base/status.h"

namespace weir {

std::string Status::str() const {
  const char* name = "ok";
  switch (code_) {
    case Code::kOk: return "ok";
    case Code::kInvalid: name = "invalid"; break;
    case Code::kNotFound: name = "not found"; break;
    case Code::kUnavailable: name = "unavailable"; break;
    case Code::kTimeout: name = "timeout"; break;
    case Code::kConflict: name = "conflict"; break;
    case Code::kTooLarge: name = "too large"; break;
    case Code::kInternal: name = "internal"; break;
  }
  return std::string(name) + ": " + message_;
}

}  // namespace weir
