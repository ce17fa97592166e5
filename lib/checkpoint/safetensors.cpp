// safetensors: the header is built and parsed with nlohmann (ordered, so the JSON
// lists tensors in the order they are stored); data is streamed straight from and
// into Tensor storage.
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/durable_file.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; dtrain writes host memory as is");

using ordered_json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference library's limit

// Bytes per element of every dtype the format defines (0: sub-byte).
const std::map<std::string, int>& known_dtypes() {
  static const std::map<std::string, int> table = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"F64", 8},  {"I64", 8}, {"U64", 8},  {"F4", 0},     {"F6_E2M3", 0}, {"F6_E3M2", 0},
      {"E8M0", 1}, {"C64", 8}};
  return table;
}

void put_u64_le(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct Entry {
  std::string name;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries;  // sorted by begin
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;     // 8 + N
};

// Parses and validates the header of a file of `file_size` bytes.
Header parse_header(const std::string& path, std::ifstream& in, uint64_t file_size) {
  auto fail = [&](const std::string& what) -> IoError {
    return IoError(str("bad safetensors file ", path, ": ", what));
  };
  if (file_size < 8) throw fail(str("truncated: ", file_size, " bytes, less than the 8-byte header length"));
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  if (!in) throw IoError(str("cannot read ", path));
  const uint64_t n = get_u64_le(len_bytes);
  if (n > kMaxHeaderBytes) throw fail(str("header length ", n, " is larger than the limit of ", kMaxHeaderBytes));
  if (n > file_size - 8)
    throw fail(str("header length ", n, " exceeds the file (", file_size, " bytes): truncated or not safetensors"));
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in) throw IoError(str("cannot read the header of ", path));
  if (text.empty() || text[0] != '{') throw fail("header does not start with '{'");

  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw fail("header is not valid JSON");
  if (!j.is_object()) throw fail("header is not a JSON object");

  Header h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) throw fail(str("__metadata__.", printable(m.key()), " is not a string"));
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = str("tensor '", printable(name), "'");
    if (!v.is_object()) throw fail(str(where, " is not an object"));
    if (!v.contains("dtype") || !v["dtype"].is_string()) throw fail(str(where, " has no dtype"));
    const std::string dtype = v["dtype"].get<std::string>();
    if (!known_dtypes().count(dtype)) throw fail(str(where, " has unknown dtype '", printable(dtype), "'"));
    if (dtype != "F32") throw fail(str(where, " has dtype ", dtype, "; only F32 is supported"));
    if (!v.contains("shape") || !v["shape"].is_array()) throw fail(str(where, " has no shape list"));
    Entry e;
    e.name = name;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw fail(str(where, " has a shape entry that is not a non-negative integer below 2^63"));
      e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    const auto& off = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw fail(str(where, " needs data_offsets [begin, end] of non-negative integers"));
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end) throw fail(str(where, " has data_offsets [", e.begin, ", ", e.end, "] with begin > end"));
    if (e.end > data_size)
      throw fail(str(where, " has data_offsets [", e.begin, ", ", e.end, "] past the end of the data (",
                     data_size, " bytes): truncated?"));
    // numel * 4 without overflow: every dimension is bounded by the data size here.
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d != 0 && numel > data_size / static_cast<uint64_t>(d)) {
        numel = UINT64_MAX;
        break;
      }
      numel *= static_cast<uint64_t>(d);
    }
    if (numel == UINT64_MAX)
      throw fail(str(where, " of shape ", shape_str(e.shape), " needs more bytes than the file's ", data_size,
                     " bytes of data"));
    if (numel * 4 != e.end - e.begin)
      throw fail(str(where, " of shape ", shape_str(e.shape), " needs ", numel * 4, " bytes but data_offsets [",
                     e.begin, ", ", e.end, "] hold ", e.end - e.begin));
    h.entries.push_back(std::move(e));
  }
  std::stable_sort(h.entries.begin(), h.entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  uint64_t expect = 0;
  for (const Entry& e : h.entries) {
    if (e.begin < expect) throw fail(str("tensor '", printable(e.name), "' overlaps the tensor before it (starts at ", e.begin,
                                         ", previous ends at ", expect, ")"));
    if (e.begin > expect)
      throw fail(str("gap in the data before tensor '", printable(e.name), "' (bytes ", expect, " to ", e.begin, ")"));
    expect = e.end;
  }
  if (expect != data_size)
    throw fail(str("data is ", data_size, " bytes but the tensors cover ", expect, " (trailing bytes)"));
  return h;
}

// Reads the header of `path` and then, in file order, the entries `keep` accepts:
// with their data when `with_data`, else with an undefined tensor.
SafetensorsFile read_impl(const std::string& path, bool with_data, const TensorFilter& keep) {
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(str("cannot read ", path, ": ", ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(str("cannot open ", path));
  Header h = parse_header(path, in, file_size);
  SafetensorsFile file;
  file.metadata = std::move(h.metadata);
  for (Entry& e : h.entries) {
    if (!keep(e.name)) continue;
    NamedTensor t{e.name, e.shape, {}};
    if (with_data) {
      t.tensor = Tensor(e.shape);
      in.seekg(static_cast<std::streamoff>(h.data_start + e.begin));
      in.read(reinterpret_cast<char*>(t.tensor.data()), static_cast<std::streamsize>(e.end - e.begin));
      if (!in) throw IoError(str("cannot read tensor '", printable(e.name), "' from ", path));
    }
    file.tensors.push_back(std::move(t));
  }
  return file;
}

bool every_tensor(const std::string&) { return true; }

}  // namespace

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const NamedTensor& t : tensors)
    if (t.name == name) return t.tensor.defined() ? &t.tensor : nullptr;
  return nullptr;
}

std::string write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata, uint64_t* bytes) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorRef& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !seen.insert(t.name).second)
      throw InternalError(str("write_safetensors(", path, "): bad or duplicate tensor name '", t.name, "'"));
    const int64_t numel = shape_numel(t.shape);
    if (numel > 0 && t.data == nullptr)
      throw InternalError(str("write_safetensors(", path, "): tensor '", t.name, "' has no data"));
    const uint64_t size = static_cast<uint64_t>(numel) * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string text = header.dump();
  // Pad with spaces so the data starts 8-byte aligned (as the reference writer does).
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix;
  put_u64_le(prefix, text.size());

  DurableFile file(path);
  file.write(prefix);
  file.write(text);
  for (const TensorRef& t : tensors)
    file.write(t.data, static_cast<size_t>(shape_numel(t.shape)) * sizeof(float));
  if (bytes) *bytes = file.bytes_written();
  return file.close();
}

SafetensorsFile read_safetensors(const std::string& path) { return read_impl(path, true, every_tensor); }

SafetensorsFile read_safetensors(const std::string& path, const TensorFilter& wanted) {
  return read_impl(path, true, wanted);
}

SafetensorsFile read_safetensors_header(const std::string& path) { return read_impl(path, false, every_tensor); }

}  // namespace dtrain::checkpoint
