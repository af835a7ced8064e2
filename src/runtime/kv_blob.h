// The byte format of a KV export (llm_session_export_kv), little-endian:
//
//   magic "LLMRTKV1" (8 bytes), version u32, model fingerprint u64, codec id u32,
//   layers u32, width u32 (values per row), positions P u32, pending count u32,
//   has_unfed u32, unfed token i32, tokens generated u32, session state u32,
//   sampler state 4 x u64, layer scales layers x f32, context tokens P x i32,
//   pending tokens x i32, rows layers x P x row_bytes (the codec's layout), trailer.
//
// Version 1 ends with the FNV-1a-64 of everything before it: it detects accidents, not tampering
// (anyone can reseal a blob). Version 2 ends with HMAC-SHA256 under a key the host supplies: a
// blob that verifies was made by a holder of the key.
#ifndef LLMRT_RUNTIME_KV_BLOB_H_
#define LLMRT_RUNTIME_KV_BLOB_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace llmrt {

// Keys of authenticated exports: at least 16 bytes (128 bits), at most 1 KiB.
inline constexpr size_t kMinKvKeyBytes = 16;
inline constexpr size_t kMaxKvKeyBytes = 1024;

struct KvBlob {
  uint32_t version = 1;
  uint64_t fingerprint = 0;
  uint32_t codec = 0;
  uint32_t layers = 0;
  uint32_t width = 0;
  uint32_t has_unfed = 0;
  int32_t unfed = -1;
  uint32_t generated = 0;
  uint32_t state = 0;
  std::array<uint64_t, 4> rng{};
  std::vector<float> scales;      // [layers]
  std::vector<int32_t> context;   // [P]
  std::vector<int32_t> pending;
  absl::Span<const uint8_t> rows;  // [layers][P][row_bytes]: a view of the parsed blob
  bool authenticated = false;
};

// Writes `b` (rows included) with a checksum, or with key non-empty an HMAC-SHA256.
std::vector<uint8_t> SerializeKvBlob(const KvBlob& b, absl::Span<const uint8_t> key);

// Verifies the trailer (the checksum; with a key, the MAC, which the blob must carry) and parses
// the header, scales and tokens. Counts are checked against the blob's size before anything is
// allocated; `rows` is the rest of the body, whose size the caller checks against the codec.
// FormatError for a truncated, altered or malformed blob; InvalidArgument for a key of the wrong
// size or an authenticated blob imported without one.
absl::StatusOr<KvBlob> ParseKvBlob(absl::Span<const uint8_t> blob, absl::Span<const uint8_t> key);

}  // namespace llmrt

#endif  // LLMRT_RUNTIME_KV_BLOB_H_
