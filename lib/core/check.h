// DT_CHECK macros: internal invariants that throw InternalError with file:line.
//
// Use them for conditions that only a dtrain bug can break. Conditions a user can
// break (bad config, bad data) throw ConfigError / IoError with a helpful message.
#pragma once

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const std::string& what) {
  throw InternalError(str("internal check failed at ", file, ":", line, ": ", what));
}
}  // namespace dtrain::detail

// DT_CHECK(cond, message parts...)
#define DT_CHECK(cond, ...)                                                               \
  do {                                                                                    \
    if (!(cond))                                                                          \
      ::dtrain::detail::check_failed(__FILE__, __LINE__,                                  \
                                     ::dtrain::str(#cond, " " __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

// DT_CHECK_OP(a, op, b): prints both values when the comparison fails.
#define DT_CHECK_OP(a, op, b)                                                              \
  do {                                                                                     \
    const auto& dt_a_ = (a);                                                               \
    const auto& dt_b_ = (b);                                                               \
    if (!(dt_a_ op dt_b_))                                                                 \
      ::dtrain::detail::check_failed(                                                      \
          __FILE__, __LINE__, ::dtrain::str(#a " " #op " " #b " (", dt_a_, " vs ", dt_b_, ")")); \
  } while (0)

#define DT_CHECK_EQ(a, b) DT_CHECK_OP(a, ==, b)
#define DT_CHECK_NE(a, b) DT_CHECK_OP(a, !=, b)
#define DT_CHECK_LE(a, b) DT_CHECK_OP(a, <=, b)
#define DT_CHECK_LT(a, b) DT_CHECK_OP(a, <, b)
#define DT_CHECK_GE(a, b) DT_CHECK_OP(a, >=, b)
#define DT_CHECK_GT(a, b) DT_CHECK_OP(a, >, b)
