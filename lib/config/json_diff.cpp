// Implementation of json_diff.h: a walk over both documents at once.
#include "config/json_diff.h"

#include <nlohmann/json.hpp>
#include <set>

namespace dtrain::config {
namespace {

using nlohmann::json;

std::string text_of(const json* value) { return value ? value->dump() : std::string("(absent)"); }

std::string child_path(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

void walk(const json* a, const json* b, const std::string& path, size_t limit, std::vector<JsonDifference>& out) {
  if (out.size() >= limit) return;
  if (a && b && *a == *b) return;
  if (a && b && a->is_object() && b->is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, v] : a->items()) keys.insert(k);
    for (const auto& [k, v] : b->items()) keys.insert(k);
    for (const std::string& k : keys) {
      const json* x = a->contains(k) ? &a->at(k) : nullptr;
      const json* y = b->contains(k) ? &b->at(k) : nullptr;
      walk(x, y, child_path(path, k), limit, out);
    }
    return;
  }
  if (a && b && a->is_array() && b->is_array() && a->size() == b->size()) {
    for (size_t i = 0; i < a->size(); ++i) walk(&(*a)[i], &(*b)[i], path + "[" + std::to_string(i) + "]", limit, out);
    return;
  }
  out.push_back({path, text_of(a), text_of(b)});
}

}  // namespace

std::vector<JsonDifference> json_differences(const std::string& left, const std::string& right, size_t limit) {
  std::vector<JsonDifference> out;
  const json a = json::parse(left, nullptr, false), b = json::parse(right, nullptr, false);
  if (a.is_discarded() || b.is_discarded()) {
    if (left != right) out.push_back({"", left, right});
    return out;
  }
  walk(&a, &b, "", limit, out);
  return out;
}

}  // namespace dtrain::config
