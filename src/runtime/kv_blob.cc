#include "src/runtime/kv_blob.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/util/errors.h"
#include "src/util/sha256.h"

namespace llmrt {
namespace {

constexpr char kMagic[8] = {'L', 'L', 'M', 'R', 'T', 'K', 'V', '1'};
constexpr uint32_t kChecksummed = 1;
constexpr uint32_t kAuthenticated = 2;

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct Writer {
  std::vector<uint8_t>* out;
  template <typename T>
  void Put(const T& v) {
    Bytes(&v, sizeof(T));
  }
  void Bytes(const void* p, size_t n) {
    if (n == 0) return;
    const auto* b = static_cast<const uint8_t*>(p);
    out->insert(out->end(), b, b + n);
  }
};

struct Reader {
  absl::Span<const uint8_t> in;
  size_t pos = 0;
  bool ok = true;
  template <typename T>
  T Get() {
    T v{};
    if (in.size() - pos < sizeof(T)) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  // n elements of T, if the blob holds them (checked before anything is allocated).
  template <typename T>
  bool Array(uint64_t n, std::vector<T>* out) {
    if (!ok || n > (in.size() - pos) / sizeof(T)) {
      ok = false;
      return false;
    }
    out->resize(static_cast<size_t>(n));
    if (n > 0) std::memcpy(out->data(), in.data() + pos, static_cast<size_t>(n) * sizeof(T));
    pos += static_cast<size_t>(n) * sizeof(T);
    return true;
  }
};

absl::Status CheckKey(absl::Span<const uint8_t> key) {
  if (key.size() < kMinKvKeyBytes || key.size() > kMaxKvKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the KV export key has ", key.size(), " bytes; it needs ",
                                                   kMinKvKeyBytes, " to ", kMaxKvKeyBytes));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<uint8_t> SerializeKvBlob(const KvBlob& b, absl::Span<const uint8_t> key) {
  std::vector<uint8_t> out;
  Writer w{&out};
  w.Bytes(kMagic, sizeof(kMagic));
  w.Put(key.empty() ? kChecksummed : kAuthenticated);
  w.Put(b.fingerprint);
  w.Put(b.codec);
  w.Put(b.layers);
  w.Put(b.width);
  w.Put(static_cast<uint32_t>(b.context.size()));
  w.Put(static_cast<uint32_t>(b.pending.size()));
  w.Put(b.has_unfed);
  w.Put(b.unfed);
  w.Put(b.generated);
  w.Put(b.state);
  for (uint64_t v : b.rng) w.Put(v);
  w.Bytes(b.scales.data(), b.scales.size() * sizeof(float));
  w.Bytes(b.context.data(), b.context.size() * sizeof(int32_t));
  w.Bytes(b.pending.data(), b.pending.size() * sizeof(int32_t));
  w.Bytes(b.rows.data(), b.rows.size());
  if (key.empty()) {
    w.Put(Fnv1a(out.data(), out.size()));
  } else {
    const Sha256::Digest mac = HmacSha256(key.data(), key.size(), out.data(), out.size());
    w.Bytes(mac.data(), mac.size());
  }
  return out;
}

absl::StatusOr<KvBlob> ParseKvBlob(absl::Span<const uint8_t> blob, absl::Span<const uint8_t> key) {
  if (!key.empty()) {
    if (absl::Status s = CheckKey(key); !s.ok()) return s;
  }
  constexpr size_t kPrefix = sizeof(kMagic) + sizeof(uint32_t);
  if (blob.size() < kPrefix + sizeof(uint64_t) || std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) {
    return FormatError("not an llmrt KV export (bad magic or too short)");
  }
  uint32_t version = 0;
  std::memcpy(&version, blob.data() + sizeof(kMagic), sizeof(version));
  size_t body = 0;
  if (version == kChecksummed) {
    if (!key.empty()) {
      return FormatError("the KV export is not authenticated (it carries a checksum, not a MAC): refused by a keyed import");
    }
    body = blob.size() - sizeof(uint64_t);
    uint64_t sum = 0;
    std::memcpy(&sum, blob.data() + body, sizeof(sum));
    if (Fnv1a(blob.data(), body) != sum) return FormatError("KV export checksum mismatch: the data was truncated or altered");
  } else if (version == kAuthenticated) {
    if (key.empty()) {
      return absl::InvalidArgumentError("the KV export is authenticated: import it with its key");
    }
    if (blob.size() < kPrefix + Sha256::kDigestBytes) return FormatError("KV export is truncated");
    body = blob.size() - Sha256::kDigestBytes;
    const Sha256::Digest mac = HmacSha256(key.data(), key.size(), blob.data(), body);
    if (!ConstantTimeEqual(mac.data(), blob.data() + body, mac.size())) {
      return FormatError("KV export MAC mismatch: the data was altered, truncated, or made with another key");
    }
  } else {
    return UnsupportedError(absl::StrCat("KV export version ", version, " (this build reads 1 and 2)"));
  }
  Reader r{blob.subspan(0, body), kPrefix};
  KvBlob b;
  b.version = version;
  b.authenticated = version == kAuthenticated;
  b.fingerprint = r.Get<uint64_t>();
  b.codec = r.Get<uint32_t>();
  b.layers = r.Get<uint32_t>();
  b.width = r.Get<uint32_t>();
  const uint32_t positions = r.Get<uint32_t>(), pending = r.Get<uint32_t>();
  b.has_unfed = r.Get<uint32_t>();
  b.unfed = r.Get<int32_t>();
  b.generated = r.Get<uint32_t>();
  b.state = r.Get<uint32_t>();
  for (auto& v : b.rng) v = r.Get<uint64_t>();
  if (!r.ok) return FormatError("KV export header is truncated");
  if (!r.Array(b.layers, &b.scales) || !r.Array(positions, &b.context) || !r.Array(pending, &b.pending)) {
    return FormatError("KV export body does not match its header");
  }
  b.rows = r.in.subspan(r.pos);
  return b;
}

}  // namespace llmrt
