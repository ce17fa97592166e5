// manifest.json reading and writing (nlohmann stays inside this file).
#include "checkpoint/manifest.h"

#include <climits>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::checkpoint {
namespace {

constexpr const char* kFormat = "dtrain-checkpoint";
constexpr int kFormatVersion = 1;

// The manifest's position, job and files, keys in the order of manifest_summary_json;
// Json is nlohmann::json (keys sorted, for manifest.json) or nlohmann::ordered_json.
template <class Json>
Json manifest_fields(const Manifest& m) {
  Json files = Json::object();
  for (const auto& [name, d] : m.files) files[name] = {{"bytes", d.bytes}, {"sha256", d.sha256}};
  return {{"step", m.step},
          {"epoch", m.epoch},
          {"samples_seen", m.samples_seen},
          {"world_size", m.world_size},
          {"config_sha256", m.config_sha256},
          {"dtrain_version", m.dtrain_version},
          {"files", files}};
}

nlohmann::json layout_to_json(const std::vector<ShardedTensor>& tensors) {
  nlohmann::json out = nlohmann::json::array();
  for (const ShardedTensor& t : tensors) {
    nlohmann::json parts = nlohmann::json::array();
    for (const TensorPart& p : t.parts) parts.push_back({{"file", p.file}, {"tensor", p.tensor}, {"offset", p.offset}});
    out.push_back({{"name", t.name}, {"shape", t.shape}, {"parts", parts}});
  }
  return out;
}

// `j` as sharded tensors; an error message through `fail` for anything malformed.
template <class Fail>
std::vector<ShardedTensor> layout_from_json(const nlohmann::json& j, const char* key, const Fail& fail) {
  if (!j.is_array()) throw fail(str("sharded.", key, " is not a list"));
  std::vector<ShardedTensor> out;
  for (const nlohmann::json& t : j) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array() || !t.contains("parts") || !t["parts"].is_array())
      throw fail(str("sharded.", key, " entries need \"name\" (string), \"shape\" and \"parts\" (lists)"));
    ShardedTensor tensor;
    tensor.name = t["name"].get<std::string>();
    for (const nlohmann::json& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw fail(str("sharded tensor ", printable(tensor.name), " has a bad shape"));
      tensor.shape.push_back(d.get<int64_t>());
    }
    for (const nlohmann::json& p : t["parts"]) {
      if (!p.is_object() || !p.contains("file") || !p["file"].is_string() || !p.contains("tensor") ||
          !p["tensor"].is_string() || !p.contains("offset") || !p["offset"].is_number_integer() ||
          p["offset"].get<int64_t>() < 0)
        throw fail(str("sharded tensor ", printable(tensor.name),
                       ": each part needs \"file\", \"tensor\" (strings) and \"offset\" (integer >= 0)"));
      tensor.parts.push_back({p["file"].get<std::string>(), p["tensor"].get<std::string>(), p["offset"].get<int64_t>()});
    }
    out.push_back(std::move(tensor));
  }
  return out;
}

}  // namespace

std::string manifest_to_json(const Manifest& m) {
  nlohmann::json rng = nlohmann::json::parse(m.rng_json, nullptr, false);
  if (rng.is_discarded() || !rng.is_object())
    throw InternalError(str("checkpoint manifest: rng state is not a JSON object: ", m.rng_json));
  nlohmann::json j = manifest_fields<nlohmann::json>(m);
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["rng"] = rng;
  if (!m.sharded.empty())
    j["sharded"] = {{"model", layout_to_json(m.sharded.model)}, {"optimizer", layout_to_json(m.sharded.optimizer)}};
  return j.dump(2) + "\n";
}

std::string manifest_summary_json(const Manifest& m) {
  nlohmann::ordered_json j = manifest_fields<nlohmann::ordered_json>(m);
  j["sharded"] = !m.sharded.empty();
  return j.dump(2);
}

Manifest manifest_from_json(const std::string& text, const std::string& source) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  auto fail = [&](const std::string& what) { return IoError(str("bad checkpoint manifest ", source, ": ", what)); };
  if (j.is_discarded() || !j.is_object()) throw fail("not a JSON object");
  if (!j.contains("format") || j["format"] != kFormat) throw fail(str("\"format\" is not \"", kFormat, "\""));
  if (!j.contains("format_version") || !j["format_version"].is_number_integer() ||
      j["format_version"] != kFormatVersion)
    throw fail(str("unsupported format_version (this dtrain reads ", kFormatVersion, ")"));
  // An integer from `min` to `max` (a number that fits an int where one holds it).
  auto integer = [&](const char* key, int64_t min, int64_t max = INT64_MAX) -> int64_t {
    if (!j.contains(key) || !j[key].is_number_integer()) throw fail(str("\"", key, "\" missing or not an integer"));
    const nlohmann::json& v = j[key];
    // nlohmann reads a number >= 0 as unsigned, and one below 0 as signed.
    const bool in_range = v.is_number_unsigned()
                              ? v.get<uint64_t>() <= static_cast<uint64_t>(max) && static_cast<int64_t>(v.get<uint64_t>()) >= min
                              : v.get<int64_t>() >= min && v.get<int64_t>() <= max;
    if (!in_range)
      throw fail(str("\"", key, "\" is ", v.dump(), ", not an integer from ", min, " to ", max));
    return v.get<int64_t>();
  };
  auto string = [&](const char* key) -> std::string {
    if (!j.contains(key) || !j[key].is_string()) throw fail(str("\"", key, "\" missing or not a string"));
    return j[key].get<std::string>();
  };
  Manifest m;
  m.step = integer("step", 0);
  m.epoch = integer("epoch", 0);
  m.samples_seen = integer("samples_seen", 0);
  m.world_size = static_cast<int>(integer("world_size", 1, INT_MAX));
  m.config_sha256 = string("config_sha256");
  m.dtrain_version = string("dtrain_version");
  if (!j.contains("rng") || !j["rng"].is_object()) throw fail("\"rng\" missing or not an object");
  m.rng_json = j["rng"].dump();
  if (!j.contains("files") || !j["files"].is_object()) throw fail("\"files\" missing or not an object");
  for (auto it = j["files"].begin(); it != j["files"].end(); ++it) {
    const nlohmann::json& f = it.value();
    if (!f.is_object() || !f.contains("sha256") || !f["sha256"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned())
      throw fail(str("files.", printable(it.key()), " needs \"sha256\" (string) and \"bytes\" (integer)"));
    m.files[it.key()] = {f["sha256"].get<std::string>(), f["bytes"].get<uint64_t>()};
  }
  if (j.contains("sharded")) {
    const nlohmann::json& sharded = j["sharded"];
    if (!sharded.is_object() || !sharded.contains("model") || !sharded.contains("optimizer"))
      throw fail("\"sharded\" needs \"model\" and \"optimizer\" lists");
    m.sharded.model = layout_from_json(sharded["model"], "model", fail);
    m.sharded.optimizer = layout_from_json(sharded["optimizer"], "optimizer", fail);
    if (m.sharded.model.empty()) throw fail("\"sharded.model\" is empty");
  }
  return m;
}

}  // namespace dtrain::checkpoint
