// Feeds: the bytes of a safetensors file (8-byte header length, JSON header,
// tensor data), as a checkpoint's model.safetensors.
// Asserts: read_safetensors() (whole, header only, and selective) returns or
// throws a dtrain error with a printable message; tensors it returns have the
// shapes their entries give, with their data.
// Mutates the JSON header as JSON (json_mutator.h) and sets its length again.
#include <utility>

#include "checkpoint/safetensors.h"
#include "fuzz_support.h"
#include "json_mutator.h"

using namespace dtrain;

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  uint64_t n = 0;
  for (int i = 7; size >= 8 && i >= 0; --i) n = (n << 8) | data[i];
  if (size < 8 || n > size - 8 || seed % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
  // The header alone, mutated as JSON in a buffer of its own, then put back between
  // a new length and the same data.
  const std::string tail(reinterpret_cast<const char*>(data) + 8 + n, size - 8 - n);
  std::vector<uint8_t> header(data + 8, data + 8 + n);
  header.resize(max_size);
  header.resize(fuzz::mutate_json(header.data(), n, max_size, seed));
  if (8 + header.size() + tail.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  for (int i = 0; i < 8; ++i) data[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::memcpy(data + 8, header.data(), header.size());
  std::memcpy(data + 8 + header.size(), tail.data(), tail.size());
  return 8 + header.size() + tail.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("model.safetensors", {reinterpret_cast<const char*>(data), size});
  fuzz::expect_clean([&] {
    const checkpoint::SafetensorsFile file = checkpoint::read_safetensors(path);
    for (const checkpoint::NamedTensor& t : file.tensors) {
      if (!t.tensor.defined() || t.tensor.shape() != t.shape)
        fuzz::fuzz_fail("read_safetensors() gave a tensor without its data or shape", t.name);
    }
  });
  fuzz::expect_clean([&] { checkpoint::read_safetensors_header(path); });
  bool first = true;
  fuzz::expect_clean([&] {
    checkpoint::read_safetensors(path, [&](const std::string&) { return std::exchange(first, false); });
  });
  return 0;
}
