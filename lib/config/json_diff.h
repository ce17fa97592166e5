// Where two JSON documents differ, as dotted key paths with both values: for
// saying which keys of two tasks' job configs disagree, not only that their
// hashes do.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace dtrain::config {

struct JsonDifference {
  std::string path;         // "train.epochs", "model.layers[2].units"; "" for the whole document
  std::string left, right;  // the values as compact JSON; "(absent)" where a side has no such key
};

// The paths where `left` and `right` (JSON texts) differ, in key order, at most
// `limit` of them (objects are compared key by key, arrays element by element
// when their lengths agree, else as a whole). A text that is not JSON compares
// as a whole.
std::vector<JsonDifference> json_differences(const std::string& left, const std::string& right, size_t limit = 8);

}  // namespace dtrain::config
