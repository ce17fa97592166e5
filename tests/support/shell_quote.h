// One word for sh, whatever it holds: 'it'\''s' (tests that build shell commands).
#pragma once

#include <string>

namespace dtrain::test {

inline std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace dtrain::test
