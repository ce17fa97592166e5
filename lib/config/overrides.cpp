// Implementation of overrides.h: parsing "key.path=value" and applying it to the JSON.
#include "config/overrides.h"

#include <cctype>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::config {
namespace {

// One step of a key path: an object key or an array index.
struct Step {
  bool is_index = false;
  std::string key;
  size_t index = 0;
};

// The override is quoted escaped and cut short; so is all of the message, whose
// paths and values come from it.
[[noreturn]] void fail(const std::string& override_text, const std::string& message) {
  throw ConfigError(printable(str("--set ", printable(override_text, 200), ": ", message), std::string::npos));
}

// "model.layers[3].units" -> {model, layers, [3], units}.
std::vector<Step> parse_path(const std::string& override_text, const std::string& path) {
  if (path.empty())
    fail(override_text,
         "the key path before '=' is empty (expected key.path=value, "
         "e.g. train.epochs=5)");
  std::vector<Step> steps;
  size_t i = 0;
  while (i < path.size()) {
    const size_t start = i;
    while (i < path.size() && path[i] != '.' && path[i] != '[' && path[i] != ']') ++i;
    if (i < path.size() && path[i] == ']')
      fail(override_text, str("unexpected ']' in '", path, "' (indices look like layers[3])"));
    if (i == start)
      fail(override_text, str("empty key name in '", path,
                              "' (expected keys joined by '.', e.g. model.layers[3].units)"));
    steps.push_back({false, path.substr(start, i - start), 0});
    while (i < path.size() && path[i] == '[') {
      const size_t close = path.find(']', i);
      if (close == std::string::npos) fail(override_text, str("missing ']' in '", path, "'"));
      const std::string digits = path.substr(i + 1, close - i - 1);
      bool ok = !digits.empty() && digits.size() <= 9;
      for (char c : digits) ok = ok && std::isdigit(static_cast<unsigned char>(c));
      if (!ok)
        fail(override_text, str("bad index [", digits, "] in '", path,
                                "' (expected a number >= 0, e.g. layers[3])"));
      steps.push_back({true, "", static_cast<size_t>(std::stoul(digits))});
      i = close + 1;
    }
    if (i < path.size()) {
      if (path[i] != '.')
        fail(override_text,
             str("unexpected '", path[i], "' after ']' in '", path, "' (expected '.' or '[')"));
      if (++i == path.size()) fail(override_text, str("'", path, "' ends with '.'"));
    }
  }
  return steps;
}

// The value text as JSON, or as a string when it is not valid JSON.
Json parse_value(const std::string& text) {
  Json value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return value.is_discarded() ? Json(text) : value;
}

bool is_scalar(const Json& v) { return v.is_number() || v.is_string() || v.is_boolean(); }

// The value to store over `old`, by the rule in overrides.h.
Json checked_value(const std::string& override_text, const std::string& path, const Json& old,
                   const std::string& text) {
  Json value = parse_value(text);
  if (old.is_string() && (value.is_number() || value.is_boolean())) return Json(text);
  const bool same_kind = (old.is_number() && value.is_number()) ||
                         (old.is_string() && value.is_string()) ||
                         (old.is_boolean() && value.is_boolean());
  if (is_scalar(old) && is_scalar(value) && !same_kind)
    fail(override_text, str(path, " holds ", kind_name(old), ", got ", describe(value)));
  return value;
}

// Steps into `node` (an object) by `key`, creating an empty object there if missing.
Json& enter_key(const std::string& override_text, Json& node, const std::string& node_path,
                const std::string& key, Context& ctx) {
  if (!node.is_object())
    fail(override_text,
         str(node_path, " is ", kind_name(node), ", not an object, so it has no key '", key, "'"));
  if (!node.contains(key)) {
    node[key] = Json::object();
    ctx.overridden[child_path(node_path, key)] = override_text;
  }
  return node[key];
}

Json& enter_index(const std::string& override_text, Json& node, const std::string& node_path,
                  size_t index) {
  if (!node.is_array())
    fail(override_text,
         str(node_path, " is ", kind_name(node), ", not an array, so it has no [", index, "]"));
  if (index >= node.size())
    fail(override_text, str("index ", index, " is out of range: ", node_path, " has ", node.size(),
                            node.size() == 1 ? " element" : " elements",
                            node.empty() ? "" : str(" (0 to ", node.size() - 1, ")")));
  return node[index];
}

void apply_one(Json& root, const std::string& override_text, Context& ctx) {
  const size_t eq = override_text.find('=');
  if (eq == std::string::npos)
    fail(override_text, "expected key.path=value, e.g. train.epochs=5 (there is no '=')");
  const std::vector<Step> steps = parse_path(override_text, override_text.substr(0, eq));
  const std::string text = override_text.substr(eq + 1);

  Json* node = &root;
  std::string path;
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const Step& step = steps[i];
    node = step.is_index ? &enter_index(override_text, *node, path, step.index)
                         : &enter_key(override_text, *node, path, step.key, ctx);
    path = step.is_index ? index_path(path, step.index) : child_path(path, step.key);
  }

  const Step& last = steps.back();
  if (last.is_index) {
    Json& slot = enter_index(override_text, *node, path, last.index);
    path = index_path(path, last.index);
    slot = checked_value(override_text, path, slot, text);
  } else {
    if (!node->is_object())
      fail(override_text, str(path, " is ", kind_name(*node), ", not an object, so it has no key '",
                              last.key, "'"));
    path = child_path(path, last.key);
    const auto it = node->find(last.key);
    (*node)[last.key] =
        it == node->end() ? parse_value(text) : checked_value(override_text, path, *it, text);
  }
  ctx.overridden[path] = override_text;
}

}  // namespace

void apply_overrides(Json& root, const std::vector<std::string>& overrides, Context& ctx) {
  for (const std::string& override_text : overrides) apply_one(root, override_text, ctx);
}

}  // namespace dtrain::config
