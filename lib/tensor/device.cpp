// Implementation of device.h.
#include "tensor/device.h"

#include <cctype>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain {
namespace {

int parse_index(const std::string& text, const std::string& digits) {
  if (digits.empty() || digits.size() > 4)
    throw ConfigError(dtrain::str("bad device '", text, "': expected cpu, cpu:N, gpu, cuda or cuda:N"));
  for (char c : digits)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      throw ConfigError(dtrain::str("bad device '", text, "': the index after ':' must be a number"));
  return std::stoi(digits);
}

}  // namespace

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "gpu" || text == "cuda") return cuda(0);
  if (text.rfind("cpu:", 0) == 0) return cpu(parse_index(text, text.substr(4)));
  if (text.rfind("cuda:", 0) == 0) return cuda(parse_index(text, text.substr(5)));
  if (text.rfind("gpu:", 0) == 0) return cuda(parse_index(text, text.substr(4)));
  throw ConfigError(dtrain::str("bad device '", text, "': expected cpu, cpu:N, gpu, cuda or cuda:N"));
}

std::string Device::str() const {
  return (type == DeviceType::kCpu ? "cpu:" : "cuda:") + std::to_string(index);
}

}  // namespace dtrain
