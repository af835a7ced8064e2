// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): the keyed MAC of authenticated KV exports.
#ifndef LLMRT_UTIL_SHA256_H_
#define LLMRT_UTIL_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace llmrt {

class Sha256 {
 public:
  static constexpr size_t kDigestBytes = 32;
  using Digest = std::array<uint8_t, kDigestBytes>;

  Sha256();
  void Update(const void* data, size_t n);
  Digest Finish();

  static Digest Hash(const void* data, size_t n);

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

// HMAC-SHA256 of message with key (any length).
Sha256::Digest HmacSha256(const void* key, size_t key_len, const void* message, size_t n);

// Compares two equal-length byte strings in time independent of where they differ.
bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace llmrt

#endif  // LLMRT_UTIL_SHA256_H_
