// SHA-256, HMAC-SHA256 and random bytes (OpenSSL's libcrypto): parameter hashes,
// checkpoint checksums, and the rendezvous handshake.
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

// HMAC-SHA256 of `data` under `key`, as raw 32 bytes.
std::string hmac_sha256(const std::string& key, const std::string& data);

// `bytes` cryptographically random bytes (OpenSSL's RAND_bytes), as lower-case hex.
std::string random_hex(size_t bytes);

// Compares two strings in time independent of where they differ.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace dtrain
