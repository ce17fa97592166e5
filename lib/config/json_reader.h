// Checked reading of JSON values for the config module (private to lib/config/).
//
// parse_json() turns text into a JSON value and reports malformed JSON as
// "source:line:column: malformed JSON: ..." ("TF_CONFIG: malformed JSON at line:column:
// ..." for a variable) and duplicate keys by their JSON path.
// ObjectReader wraps one JSON object and its path ("model.layers[3]"): it hands out
// typed fields with range checks and defaults, remembers every key the schema asked
// for, and finish() rejects the keys nobody asked for, with a "did you mean"
// suggestion; expect_keys() declares the valid keys up front, so unknown keys are
// reported before anything else (a misspelt required key reads as a misspelling,
// not as a missing key). The free read_* functions check single values (array
// elements, shorthand forms). Every failure is a ConfigError that names the source,
// the JSON path, what was expected and what was found. This header includes
// nlohmann/json, so only the config module's .cpp files may include it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/section.h"

namespace dtrain::config {

using Json = nlohmann::json;

// Parses JSON text; ConfigError for malformed JSON (with line:column), duplicate keys, or
// nesting deeper than 100 levels of arrays and objects.
Json parse_json(const std::string& text, const Context& ctx);


// How a value is shown in messages: "\"64\" (a string)", "[1, 2] (an array)", "null".
// Long values are shortened.
std::string describe(const Json& value);
// The value as written, shortened: "0", "1.5", "\"x\"".
std::string show(const Json& value);
// "a string", "a number", "a boolean", "an array", "an object", "null".
std::string kind_name(const Json& value);


// Single-value checks; `path` is the value's own path.
int64_t read_int(const Context& ctx, const Json& value, const std::string& path, int64_t min);
double read_double(const Context& ctx, const Json& value, const std::string& path,
                   const NumberRange& range);
bool read_bool(const Context& ctx, const Json& value, const std::string& path);
std::string read_string(const Context& ctx, const Json& value, const std::string& path,
                        bool allow_empty = false);
// One of `choices` (noun names them: "layer type", "padding").
std::string read_choice(const Context& ctx, const Json& value, const std::string& path,
                        const std::vector<std::string>& choices, const std::string& noun);
// A positive int n (-> {n, n}) or [h, w] of positive ints.
void read_pair(const Context& ctx, const Json& value, const std::string& path, int64_t out[2]);
// An array of 1..3 positive ints.
std::vector<int64_t> read_shape(const Context& ctx, const Json& value, const std::string& path);
// A non-empty array of non-empty strings.
std::vector<std::string> read_string_list(const Context& ctx, const Json& value,
                                          const std::string& path);

class ObjectReader {
 public:
  // `value` must be an object, else a ConfigError that says what was found. `what`
  // names the object in messages: "a Dense layer", "the train section".
  ObjectReader(const Context& ctx, const Json& value, std::string path, std::string what);

  const std::string& path() const { return path_; }
  // Renames the object once its type is known: "a layer" -> "a Dense layer".
  void set_what(std::string what) { what_ = std::move(what); }
  const Context& context() const { return ctx_; }
  std::string path_of(const std::string& key) const { return child_path(path_, key); }
  bool has(const std::string& key) const { return object_.contains(key); }

  // Registers `key` as valid here; returns its value, or nullptr when absent.
  const Json* find(const std::string& key);
  // Like find(), but a missing key is an error: "a Dense layer needs 'units'".
  // `hint` is appended to that message, e.g. " (one of sgd, adam, adamw)".
  const Json& require(const std::string& key, const std::string& hint = "");

  int64_t get_int(const std::string& key, int64_t fallback, int64_t min);
  int64_t require_int(const std::string& key, int64_t min);
  double get_double(const std::string& key, double fallback, const NumberRange& range);
  double require_double(const std::string& key, const NumberRange& range);
  bool get_bool(const std::string& key, bool fallback);
  std::string get_string(const std::string& key, const std::string& fallback);
  std::string require_string(const std::string& key);
  std::string get_choice(const std::string& key, const std::string& fallback,
                         const std::vector<std::string>& choices, const std::string& noun);
  std::string require_choice(const std::string& key, const std::vector<std::string>& choices,
                             const std::string& noun);
  // Int-or-pair fields: the pair is left as it is when the key is absent.
  void get_pair(const std::string& key, int64_t out[2]);

  // A note for a key that is valid elsewhere ("'files' belongs to cifar10 sources").
  using Explain = std::function<std::string(const std::string&)>;

  // Declares every key this object may hold and rejects any other key now, before
  // values are read, so that a misspelt key is reported as unknown (with the closest
  // valid key, or `explain`'s note) rather than as a missing required key.
  void expect_keys(const std::vector<std::string>& keys, const Explain& explain = {});

  // Rejects every key that was neither declared nor asked for, listing the valid
  // ones; then checks that each declared key was read (an InternalError otherwise: a
  // key list and the reading code disagree).
  void finish(const Explain& explain = {}) const;

 private:
  const Context& ctx_;
  const Json& object_;
  std::string path_;
  std::string what_;
  void reject_unknown(const Explain& explain) const;

  std::vector<std::string> known_;  // valid keys: declared or asked for, in that order
  std::vector<std::string> asked_;  // keys a getter asked for
};

}  // namespace dtrain::config
