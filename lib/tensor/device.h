// Device: where a tensor lives and where an op runs ("cpu", "cuda:0").
#pragma once

#include <string>

namespace dtrain {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device cpu(int index = 0) { return {DeviceType::kCpu, index}; }
  static Device cuda(int index) { return {DeviceType::kCuda, index}; }

  // Parses "cpu", "cpu:1", "gpu", "cuda", "cuda:2"; throws ConfigError otherwise.
  static Device parse(const std::string& text);

  bool is_cpu() const { return type == DeviceType::kCpu; }
  std::string str() const;
  bool operator==(const Device& other) const = default;
};

}  // namespace dtrain
