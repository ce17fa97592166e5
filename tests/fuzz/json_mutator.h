// A structure-aware libFuzzer mutator for the targets whose input is JSON text
// (optionally followed by NUL-separated parts, which it keeps).
//
// Byte mutations of JSON mostly give malformed JSON, so the readers' type checks
// (a number or null where an object belongs, an object where a string does) are
// rarely reached. Three times in four this mutator parses the JSON, changes one
// value (replaces it by null, a number, a string, an empty array or object, a copy
// of another value; deletes or adds a member), and writes it back; otherwise, or
// when the input is not JSON, it lets libFuzzer mutate the bytes. A target uses it
// with DTRAIN_FUZZ_JSON_MUTATOR() at file scope.
#pragma once

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace dtrain::fuzz {

namespace detail {

inline void collect_values(nlohmann::json& j, std::vector<nlohmann::json*>& out) {
  out.push_back(&j);
  if (j.is_structured())
    for (auto& child : j) collect_values(child, out);
}

inline nlohmann::json random_scalar(std::minstd_rand& rng, const std::vector<nlohmann::json*>& values) {
  static const nlohmann::json kScalars[] = {
      nullptr, true, false, 0, -1, 1, 2, 3, 7, 255, 65536, 2147483648LL, -9223372036854775807LL - 1,
      18446744073709551615ULL, 0.5, -0.0, 1e308, "", "x", "\u0001", "\u0085", "float32", "Dense", "worker",
      "chief:0", "h:1", "auto", "relu", "same"};
  const size_t n = sizeof kScalars / sizeof kScalars[0];
  // Sometimes a string or number from the document itself.
  if (rng() % 4 == 0) {
    const nlohmann::json* v = values[rng() % values.size()];
    if (v->is_primitive()) return *v;
  }
  return kScalars[rng() % n];
}

}  // namespace detail

inline size_t mutate_json(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  std::minstd_rand rng(seed);
  if (rng() % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t json_size = nul ? static_cast<size_t>(nul - data) : size;
  nlohmann::json doc = nlohmann::json::parse(data, data + json_size, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return LLVMFuzzerMutate(data, size, max_size);
  std::vector<nlohmann::json*> values;
  detail::collect_values(doc, values);
  nlohmann::json& v = *values[rng() % values.size()];
  switch (rng() % 8) {
    case 0: v = nullptr; break;
    case 1:
    case 2: v = detail::random_scalar(rng, values); break;
    case 3: v = rng() % 2 ? nlohmann::json::array() : nlohmann::json::array({v}); break;
    case 4: v = nlohmann::json::object(); break;
    case 5: v = nlohmann::json(*values[rng() % values.size()]); break;  // a copy of another value
    case 6:  // delete a member or an element
      if (v.is_object() && !v.empty()) {
        auto it = v.begin();
        std::advance(it, rng() % v.size());
        v.erase(it);
      } else if (v.is_array() && !v.empty()) {
        v.erase(v.begin() + static_cast<std::ptrdiff_t>(rng() % v.size()));
      }
      break;
    default:  // add a member (a key from elsewhere in the document) or an element
      if (v.is_object()) {
        std::string key = "x";
        for (int tries = 0; tries < 8; ++tries) {
          const nlohmann::json* other = values[rng() % values.size()];
          if (other->is_object() && !other->empty()) {
            auto it = other->begin();
            std::advance(it, rng() % other->size());
            key = it.key();
            break;
          }
        }
        v[key] = detail::random_scalar(rng, values);
      } else if (v.is_array()) {
        v.push_back(v.empty() ? detail::random_scalar(rng, values) : nlohmann::json(v[rng() % v.size()]));
      }
      break;
  }
  std::string text = doc.dump(rng() % 2 ? -1 : 1);
  text.append(reinterpret_cast<const char*>(data) + json_size, size - json_size);  // the other parts
  if (text.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, text.data(), text.size());
  return text.size();
}

}  // namespace dtrain::fuzz

#define DTRAIN_FUZZ_JSON_MUTATOR()                                                                  \
  extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned seed) { \
    return dtrain::fuzz::mutate_json(data, size, max_size, seed);                                   \
  }
