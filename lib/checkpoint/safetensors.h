// A reader and writer for the safetensors format (huggingface/safetensors), so a
// dtrain checkpoint loads in Python with the safetensors package or plain NumPy:
//
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   JSON: {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..],
//             "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8
//   the rest  the tensors' raw little-endian bytes; offsets are relative to here
//
// dtrain writes tensors contiguously in the order given. Only F32 is written or
// read today; other known dtypes are reported as unsupported.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace dtrain::checkpoint {

// A tensor to write: borrowed host float32 data of numel(shape) elements.
struct TensorRef {
  std::string name;
  Shape shape;
  const float* data = nullptr;
};

// A tensor read back: its own storage, or undefined after a header-only read.
struct NamedTensor {
  std::string name;
  Shape shape;
  Tensor tensor;
};

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in file (data offset) order
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
};

// Writes `tensors` (names unique and non-empty) to `path` and fsyncs it.
// Returns the file's SHA-256 (hex); `bytes` (if given) gets its size.
// Throws IoError on a write failure, InternalError on bad input.
std::string write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata,
                              uint64_t* bytes = nullptr);

// Reads and validates a whole file: header length against the file size, JSON
// shape, known dtypes, shapes, offsets within the data, sizes = numel * 4, no
// overlaps and no gaps. Throws IoError naming the file and what is wrong.
SafetensorsFile read_safetensors(const std::string& path);

// Which tensors a selective read keeps: true for the name of a tensor to read.
using TensorFilter = std::function<bool(const std::string& name)>;

// Reads and validates the header as read_safetensors does (the whole header, every
// tensor's entry), then the data of only the tensors `wanted` accepts, seeking to
// each: the others are left out of the result (find() gives nullptr for them).
SafetensorsFile read_safetensors(const std::string& path, const TensorFilter& wanted);

// Reads and validates only the header (no tensor data).
// Tensors come back with their shapes and an undefined `tensor`.
SafetensorsFile read_safetensors_header(const std::string& path);

}  // namespace dtrain::checkpoint
