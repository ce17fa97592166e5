// Implementation of sha256.h on OpenSSL's EVP digest interface.
#include "core/sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/random.h>

#include <cerrno>

#include "core/check.h"

namespace dtrain {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
  bool finished = false;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  DT_CHECK(impl_->ctx != nullptr, "EVP_MD_CTX_new failed");
  DT_CHECK(EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) == 1, "EVP_DigestInit_ex failed");
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::update(const void* data, size_t size) {
  DT_CHECK(!impl_->finished, "update after hex_digest");
  DT_CHECK(EVP_DigestUpdate(impl_->ctx, data, size) == 1, "EVP_DigestUpdate failed");
}

std::string Sha256::hex_digest() {
  DT_CHECK(!impl_->finished, "hex_digest called twice");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  DT_CHECK(EVP_DigestFinal_ex(impl_->ctx, digest, &length) == 1, "EVP_DigestFinal_ex failed");
  impl_->finished = true;
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(const void* data, size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.hex_digest();
}

std::string hmac_sha256(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  const unsigned char* result =
      HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &length);
  DT_CHECK(result != nullptr, "HMAC failed");
  return std::string(reinterpret_cast<const char*>(out), length);
}

// The kernel's generator (getrandom(2)), not OpenSSL's RAND_bytes: OpenSSL keeps
// a generator per thread, and seeding one cost about 0.3 ms on each thread's
// first nonce (a simulated task of `bench rendezvous` is a thread of its own).
std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t filled = 0;
  while (filled < bytes) {
    const ssize_t n = getrandom(raw.data() + filled, bytes - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    DT_CHECK(n > 0, "getrandom failed");
    filled += static_cast<size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace dtrain
