// Implementation of variables.h.
#include "config/variables.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::config {

const std::string* find_variable(const EnvVars& vars, const std::string& name) {
  const auto it = vars.find(name);
  return it == vars.end() || it->second.empty() ? nullptr : &it->second;
}

int variable_number(const std::string& name, const std::string& value, const std::string& hint) {
  const bool digits = value.size() <= 9 && all_digits(value);
  if (!digits)
    throw ConfigError(
        str(name, "='", printable(value), "': expected a whole number >= 0", hint.empty() ? "" : str(" (", hint, ")")));
  return std::stoi(value);
}

}  // namespace dtrain::config
