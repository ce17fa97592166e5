// manifest.json reading and writing (nlohmann stays inside this file).
#include "checkpoint/manifest.h"

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

}  // namespace

std::string manifest_to_json(const Manifest& m) {
  nlohmann::json rng = nlohmann::json::parse(m.rng_json, nullptr, false);
  if (rng.is_discarded() || !rng.is_object())
    throw InternalError(str("checkpoint manifest: rng state is not a JSON object: ", m.rng_json));
  nlohmann::json j = manifest_fields<nlohmann::json>(m);
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["rng"] = rng;
  return j.dump(2) + "\n";
}

std::string manifest_summary_json(const Manifest& m) { return manifest_fields<nlohmann::ordered_json>(m).dump(2); }

Manifest manifest_from_json(const std::string& text, const std::string& source) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  auto fail = [&](const std::string& what) { return IoError(str("bad checkpoint manifest ", source, ": ", what)); };
  if (j.is_discarded() || !j.is_object()) throw fail("not a JSON object");
  if (j.value("format", "") != kFormat) throw fail(str("\"format\" is not \"", kFormat, "\""));
  if (!j.contains("format_version") || !j["format_version"].is_number_integer() ||
      j["format_version"].get<int>() != kFormatVersion)
    throw fail(str("unsupported format_version (this dtrain reads ", kFormatVersion, ")"));
  auto integer = [&](const char* key) -> int64_t {
    if (!j.contains(key) || !j[key].is_number_integer()) throw fail(str("\"", key, "\" missing or not an integer"));
    return j[key].get<int64_t>();
  };
  auto string = [&](const char* key) -> std::string {
    if (!j.contains(key) || !j[key].is_string()) throw fail(str("\"", key, "\" missing or not a string"));
    return j[key].get<std::string>();
  };
  Manifest m;
  m.step = integer("step");
  m.epoch = integer("epoch");
  m.samples_seen = integer("samples_seen");
  m.world_size = static_cast<int>(integer("world_size"));
  m.config_sha256 = string("config_sha256");
  m.dtrain_version = string("dtrain_version");
  if (!j.contains("rng") || !j["rng"].is_object()) throw fail("\"rng\" missing or not an object");
  m.rng_json = j["rng"].dump();
  if (!j.contains("files") || !j["files"].is_object()) throw fail("\"files\" missing or not an object");
  for (auto it = j["files"].begin(); it != j["files"].end(); ++it) {
    const nlohmann::json& f = it.value();
    if (!f.is_object() || !f.contains("sha256") || !f["sha256"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned())
      throw fail(str("files.", it.key(), " needs \"sha256\" (string) and \"bytes\" (integer)"));
    m.files[it.key()] = {f["sha256"].get<std::string>(), f["bytes"].get<uint64_t>()};
  }
  return m;
}

}  // namespace dtrain::checkpoint
