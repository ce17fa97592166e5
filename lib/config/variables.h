// Reading environment variables for the cluster resolvers (private to lib/config):
// a variable's value when set, and whole numbers with errors that name the variable.
#pragma once

#include <string>

#include "config/cluster_spec.h"

namespace dtrain::config {

// The value of `name`, or nullptr when it is unset or empty.
const std::string* find_variable(const EnvVars& vars, const std::string& name);

// `value` of variable `name` as a whole number >= 0 (at most 9 digits); otherwise
// ConfigError "NAME='value': expected a whole number >= 0" plus " (hint)" when given.
int variable_number(const std::string& name, const std::string& value, const std::string& hint = "");

}  // namespace dtrain::config
