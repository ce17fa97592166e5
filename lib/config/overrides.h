// --set overrides: "key.path=value" edits applied to a job's JSON before it is read
// (private to lib/config/).
//
// The path is JSON keys joined by '.', with [index] for array elements
// ("model.layers[3].units"). The value is parsed as JSON when it is valid JSON, else
// taken as a string ("output.dir=runs/x"). Type rule: numbers, strings and booleans
// keep their kind (a number cannot become a string, and so on); where a string is
// held, a value that reads as a number or boolean is taken as its text
// ("output.dir=2024" is the string "2024"). Any other change (to or from null, an
// array or an object) is left to the schema, which knows the fields that take
// either form (kernel_size 3 or [3, 3], learning_rate 0.01 or a schedule, loss "mse"
// or {"type": "mse"}). A missing key is added, and so are missing objects on the way
// ("runtime.threads=4" works without a runtime section); the schema then rejects
// misspelt keys with a suggestion and a note that they came from --set. Array
// elements cannot be added: an index must be in range.
#pragma once

#include <string>
#include <vector>

#include "config/json_reader.h"

namespace dtrain::config {

// Applies the overrides in order to `root` (an object) and records each path it set
// in ctx.overridden. Errors are ConfigErrors that start with "--set <override>: ".
void apply_overrides(Json& root, const std::vector<std::string>& overrides, Context& ctx);

}  // namespace dtrain::config
