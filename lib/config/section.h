// JSON-free reading of a job file, for the modules that own a vocabulary (nn's
// layers and losses, optim's optimizers and schedules, data's formats, strategy's
// strategies): they read their own sections with it and never see nlohmann/json.
//
// A Value is one JSON value of the file with its path ("model.layers[3]"); a
// Section is one JSON object being read, as ObjectReader does it (json_reader.h):
// typed getters with defaults and ranges, declared keys, unknown keys reported
// with the closest valid one or a note saying which type a key belongs to, and
// finish() rejecting what nobody read. Every failure is a ConfigError naming the
// file, the JSON path and the fix. Values and Sections are views into JSON that a
// Document (or the job reader, lib/job) owns: use them while it lives.
//
// KeyDoc is how a vocabulary entry declares one of its keys for the README's
// reference tables and the "belongs to" notes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::config {

// Where the values come from, for messages.
struct Context {
  std::string source;  // "job.json", "<string>" or "TF_CONFIG"
  // True when `source` is an environment variable rather than a file: paths are then
  // written "TF_CONFIG.cluster.worker[2]" and JSON syntax errors "TF_CONFIG: malformed
  // JSON at 1:5: ..." (there is no file to open at a line:column).
  bool variable = false;
  // JSON paths that --set replaced or added (path -> the override), so that an
  // error about them can point at the command line instead of the file.
  std::map<std::string, std::string> overridden;

  // Where `path` is, for messages: "job.json: cluster.worker[2]" (a file),
  // "TF_CONFIG.cluster.worker[2]" (a variable), the source alone for an empty path.
  std::string where(const std::string& path) const;
  // Throws ConfigError("<where(path)>: message"). When `blame` (default: `path`) or a
  // parent of it came from --set, the message says so.
  [[noreturn]] void fail(const std::string& path, const std::string& message,
                         const std::string* blame = nullptr) const;
  // " (from --set x=1)" when `path` or a parent of it came from an override, else "".
  std::string origin(const std::string& path) const;
};

// A number's allowed interval, with how to say it in messages.
struct NumberRange {
  double lo;
  bool lo_open;
  double hi;
  bool hi_open;
  const char* text;  // "a positive number", "a number in [0, 1)", ...
};
inline constexpr double kInfinity = 1e308;
inline constexpr NumberRange kPositive{0.0, true, kInfinity, false, "a positive number"};
inline constexpr NumberRange kNonNegative{0.0, false, kInfinity, false, "a number >= 0"};
inline constexpr NumberRange kFraction{0.0, false, 1.0, true, "a number in [0, 1)"};
inline constexpr NumberRange kUnitInterval{0.0, false, 1.0, false, "a number in [0, 1]"};
// Durations: at most 1e7 s (about 116 days), so that no deadline computed from
// one overflows a clock's count of nanoseconds (which ends near 9.2e9 s).
inline constexpr double kMaxSeconds = 1e7;
inline constexpr NumberRange kSeconds{0.0, true, kMaxSeconds, false, "a positive number of seconds, at most 1e7"};
inline constexpr NumberRange kSecondsOrZero{0.0, false, kMaxSeconds, false, "a number of seconds in [0, 1e7]"};

class ObjectReader;

// Path helpers: child_path("model", "layers") == "model.layers",
// index_path("model.layers", 3) == "model.layers[3]", child_path("", "model") == "model".
std::string child_path(const std::string& path, const std::string& key);
std::string index_path(const std::string& path, size_t index);


// One key a vocabulary entry takes: its name and, for the reference tables, what
// it means with its default or range ("output features; required, >= 1").
struct KeyDoc {
  std::string name;
  std::string doc;
};

// The names of `keys`, in order.
std::vector<std::string> key_names(const std::vector<KeyDoc>& keys);

// "a", "a and b", "a, b and c".
std::string join_and(const std::vector<std::string>& names);
// "a Dense layer", "an idx source".
std::string with_article(const std::string& word);

class Value {
 public:
  const std::string& path() const { return path_; }
  const Context& context() const { return *ctx_; }
  bool is_null() const;
  bool is_bool() const;
  bool is_number() const;
  bool is_integer() const;
  bool is_string() const;
  bool is_array() const;
  bool is_object() const;
  size_t size() const;         // an array's elements (0 for other values)
  Value at(size_t index) const;  // element `index` of an array, path "<path>[index]"
  // An object's member names, sorted (none for other values), and
  // member `key` (path "<path>.<key>"; it must be one of them).
  std::vector<std::string> member_names() const;
  Value member(const std::string& key) const;
  // How the value is shown in messages: "\"64\" (a string)"; as written: "64".
  std::string describe() const;
  std::string show() const;

  // Checked conversions (json_reader.h's read_*): ConfigError naming the path.
  int64_t to_int(int64_t min) const;
  double to_double(const NumberRange& range) const;
  bool to_bool() const;
  std::string to_string(bool allow_empty = false) const;
  std::string to_choice(const std::vector<std::string>& choices, const std::string& noun) const;
  void to_pair(int64_t out[2]) const;
  std::vector<int64_t> to_shape() const;
  std::vector<std::string> to_string_list() const;

  // Throws ConfigError("<file>: <path>: message").
  [[noreturn]] void fail(const std::string& message) const;

  // For config's own code: the JSON behind the view (a const nlohmann::json*).
  const void* json() const { return json_; }
  Value(const Context& ctx, const void* json, std::string path) : ctx_(&ctx), json_(json), path_(std::move(path)) {}

 private:
  const Context* ctx_;
  const void* json_;
  std::string path_;
};

class Section {
 public:
  // `value` must be an object, else a ConfigError that says what was found. `what`
  // names it in messages: "a Dense layer", "the train section".
  Section(const Value& value, std::string what);
  ~Section();
  Section(Section&&) noexcept;
  Section(const Section&) = delete;
  Section& operator=(const Section&) = delete;

  const std::string& path() const;
  std::string path_of(const std::string& key) const;
  const Context& context() const;
  void set_what(std::string what);
  bool has(const std::string& key) const;

  // Registers `key` as valid here; its value, or nullopt when absent.
  std::optional<Value> find(const std::string& key);
  // Like find(), but a missing key is an error ("a Dense layer needs 'units'" + hint).
  Value require(const std::string& key, const std::string& hint = "");

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
  // Declares every key this object may hold and rejects any other key now.
  void expect_keys(const std::vector<std::string>& keys, const Explain& explain = {});
  // Rejects keys nobody declared or read; checks every declared key was read.
  void finish(const Explain& explain = {}) const;
  // Throws ConfigError at path_of(key) ("" = the object itself).
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

  // For config's own code.
  ObjectReader& reader() { return *reader_; }

 private:
  std::unique_ptr<ObjectReader> reader_;
};

// Parsed JSON text that owns its values (for small inputs and tests).
class Document {
 public:
  Document(const std::string& text, const std::string& source);
  ~Document();
  Document(const Document&) = delete;
  Document& operator=(const Document&) = delete;
  Value root() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "unknown padding 'smae'; did you mean 'same'? (valid: valid, same)"
std::string unknown_choice_message(const std::string& noun, const std::string& value,
                                   const std::vector<std::string>& choices);

// The entry of a registry table named `name` (entries have a `name`; the table
// holds entries or pointers to them); otherwise a ConfigError
// "unknown <noun> 'x'; did you mean 'y'? (valid: ...)".
[[noreturn]] void throw_unknown_entry(const std::string& noun, const std::string& name,
                                      const std::vector<std::string>& names);
template <class T>
const T& registry_entry(const T& entry) {
  return entry;
}
template <class T>
const T& registry_entry(const T* entry) {
  return *entry;
}
// The names of a registry table's entries, in order.
template <class Table>
std::vector<std::string> entry_names(const Table& table) {
  std::vector<std::string> names;
  for (const auto& e : table) names.push_back(registry_entry(e).name);
  return names;
}

template <class Table>
const auto& find_entry(const Table& table, const std::string& name, const std::string& noun) {
  for (const auto& e : table)
    if (registry_entry(e).name == name) return registry_entry(e);
  throw_unknown_entry(noun, name, entry_names(table));
}

// What one entry's object may hold: `head` ("type", ...), the names of the
// entry's `keys`, then `tail`.
std::vector<std::string> declared_keys(std::vector<std::string> head, const std::vector<KeyDoc>& keys,
                                       const std::vector<std::string>& tail = {});

// The unknown-key note of a vocabulary: "'units' belongs to Dense layers" when `key`
// is a key of other entries (`owners`: entry name -> its keys); "" otherwise.
std::string owner_note(const std::vector<std::pair<std::string, std::vector<std::string>>>& owners,
                       const std::string& plural, const std::string& key);
// The same over a registry table whose entries declare `keys` (KeyDocs).
template <class Table>
std::string entry_key_note(const Table& table, const std::string& plural, const std::string& key) {
  std::vector<std::pair<std::string, std::vector<std::string>>> owners;
  for (const auto& e : table) owners.emplace_back(registry_entry(e).name, key_names(registry_entry(e).keys));
  return owner_note(owners, plural, key);
}

}  // namespace dtrain::config
