// Implementation of section.h over json_reader.h (nlohmann/json stays in here).
#include "config/section.h"

#include <cstring>

#include "config/json_reader.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::config {
namespace {

const Json& json_of(const Value& v) { return *static_cast<const Json*>(v.json()); }

}  // namespace

std::vector<std::string> key_names(const std::vector<KeyDoc>& keys) {
  std::vector<std::string> names;
  for (const KeyDoc& k : keys) names.push_back(k.name);
  return names;
}

std::vector<std::string> declared_keys(std::vector<std::string> head, const std::vector<KeyDoc>& keys,
                                       const std::vector<std::string>& tail) {
  for (const KeyDoc& k : keys) head.push_back(k.name);
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

std::string join_and(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

std::string with_article(const std::string& word) {
  const bool vowel = !word.empty() && std::strchr("aeiouAEIOU", word[0]) != nullptr;
  return str(vowel ? "an " : "a ", word);
}

std::string owner_note(const std::vector<std::pair<std::string, std::vector<std::string>>>& owners,
                       const std::string& plural, const std::string& key) {
  std::vector<std::string> types;
  for (const auto& [type, keys] : owners)
    for (const auto& k : keys)
      if (k == key) types.push_back(type);
  return types.empty() ? std::string() : str("'", printable(key), "' belongs to ", join_and(types), " ", plural);
}

void throw_unknown_entry(const std::string& noun, const std::string& name, const std::vector<std::string>& names) {
  throw ConfigError(unknown_choice_message(noun, name, names));
}

// ---- Value ----

bool Value::is_null() const { return json_of(*this).is_null(); }
bool Value::is_bool() const { return json_of(*this).is_boolean(); }
bool Value::is_number() const { return json_of(*this).is_number(); }
bool Value::is_integer() const { return json_of(*this).is_number_integer(); }
bool Value::is_string() const { return json_of(*this).is_string(); }
bool Value::is_array() const { return json_of(*this).is_array(); }
bool Value::is_object() const { return json_of(*this).is_object(); }
size_t Value::size() const { return json_of(*this).is_array() ? json_of(*this).size() : 0; }
Value Value::at(size_t index) const { return Value(*ctx_, &json_of(*this).at(index), index_path(path_, index)); }
std::vector<std::string> Value::member_names() const {
  std::vector<std::string> names;
  if (json_of(*this).is_object())
    for (const auto& item : json_of(*this).items()) names.push_back(item.key());
  return names;
}
Value Value::member(const std::string& key) const {
  return Value(*ctx_, &json_of(*this).at(key), path_.empty() ? key : path_ + "." + key);
}
std::string Value::describe() const { return config::describe(json_of(*this)); }
std::string Value::show() const { return config::show(json_of(*this)); }
int64_t Value::to_int(int64_t min) const { return read_int(*ctx_, json_of(*this), path_, min); }
double Value::to_double(const NumberRange& range) const { return read_double(*ctx_, json_of(*this), path_, range); }
bool Value::to_bool() const { return read_bool(*ctx_, json_of(*this), path_); }
std::string Value::to_string(bool allow_empty) const { return read_string(*ctx_, json_of(*this), path_, allow_empty); }
std::string Value::to_choice(const std::vector<std::string>& choices, const std::string& noun) const {
  return read_choice(*ctx_, json_of(*this), path_, choices, noun);
}
void Value::to_pair(int64_t out[2]) const { read_pair(*ctx_, json_of(*this), path_, out); }
std::vector<int64_t> Value::to_shape() const { return read_shape(*ctx_, json_of(*this), path_); }
std::vector<std::string> Value::to_string_list() const { return read_string_list(*ctx_, json_of(*this), path_); }
void Value::fail(const std::string& message) const { ctx_->fail(path_, message); }

// ---- Section ----

Section::Section(const Value& value, std::string what)
    : reader_(std::make_unique<ObjectReader>(value.context(), json_of(value), value.path(), std::move(what))) {}
Section::~Section() = default;
Section::Section(Section&&) noexcept = default;

const std::string& Section::path() const { return reader_->path(); }
std::string Section::path_of(const std::string& key) const { return reader_->path_of(key); }
const Context& Section::context() const { return reader_->context(); }
void Section::set_what(std::string what) { reader_->set_what(std::move(what)); }
bool Section::has(const std::string& key) const { return reader_->has(key); }

std::optional<Value> Section::find(const std::string& key) {
  const Json* value = reader_->find(key);
  if (!value) return std::nullopt;
  return Value(reader_->context(), value, path_of(key));
}

Value Section::require(const std::string& key, const std::string& hint) {
  return Value(reader_->context(), &reader_->require(key, hint), path_of(key));
}

int64_t Section::get_int(const std::string& key, int64_t fallback, int64_t min) {
  return reader_->get_int(key, fallback, min);
}
int64_t Section::require_int(const std::string& key, int64_t min) { return reader_->require_int(key, min); }
double Section::get_double(const std::string& key, double fallback, const NumberRange& range) {
  return reader_->get_double(key, fallback, range);
}
double Section::require_double(const std::string& key, const NumberRange& range) {
  return reader_->require_double(key, range);
}
bool Section::get_bool(const std::string& key, bool fallback) { return reader_->get_bool(key, fallback); }
std::string Section::get_string(const std::string& key, const std::string& fallback) {
  return reader_->get_string(key, fallback);
}
std::string Section::require_string(const std::string& key) { return reader_->require_string(key); }
std::string Section::get_choice(const std::string& key, const std::string& fallback,
                                const std::vector<std::string>& choices, const std::string& noun) {
  return reader_->get_choice(key, fallback, choices, noun);
}
std::string Section::require_choice(const std::string& key, const std::vector<std::string>& choices,
                                    const std::string& noun) {
  return reader_->require_choice(key, choices, noun);
}
void Section::get_pair(const std::string& key, int64_t out[2]) { reader_->get_pair(key, out); }
void Section::expect_keys(const std::vector<std::string>& keys, const Explain& explain) {
  reader_->expect_keys(keys, explain);
}
void Section::finish(const Explain& explain) const { reader_->finish(explain); }
void Section::fail(const std::string& key, const std::string& message) const {
  reader_->context().fail(key.empty() ? path() : path_of(key), message);
}

// ---- Document ----

struct Document::Impl {
  Context ctx;
  Json root;
};

Document::Document(const std::string& text, const std::string& source) : impl_(std::make_unique<Impl>()) {
  impl_->ctx.source = source;
  impl_->root = parse_json(text, impl_->ctx);
}
Document::~Document() = default;
Value Document::root() const { return Value(impl_->ctx, &impl_->root, ""); }

}  // namespace dtrain::config
