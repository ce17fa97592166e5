// SHA-256 (OpenSSL's libcrypto), for parameter hashes and checkpoint checksums.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace dtrain {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  void update(const std::string& text) { update(text.data(), text.size()); }

  // Lower-case hex digest. The object cannot be updated afterwards.
  std::string hex_digest();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One-shot convenience.
std::string sha256_hex(const void* data, size_t size);
inline std::string sha256_hex(const std::string& text) { return sha256_hex(text.data(), text.size()); }

}  // namespace dtrain
