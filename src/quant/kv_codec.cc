#include "src/quant/kv_codec.h"

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "src/quant/codecs/builtin.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

struct Registry {
  std::mutex mu;
  std::map<uint32_t, const KvCodec*> by_id;
};

Registry& Get() {
  static Registry* r = [] {
    auto* reg = new Registry();
    for (const KvCodec* c : {&codecs::F32(), &codecs::Bf16(), &codecs::Fp8(), &codecs::Fp8Tiled()}) {
      reg->by_id[c->id()] = c;
    }
    return reg;
  }();
  return *r;
}

}  // namespace

int64_t KvShape::width() const {
  int64_t w = 0;
  for (const KvPart& p : parts) w += p.count;
  return w;
}

const KvCodec* FindKvCodec(uint32_t id) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_id.find(id);
  return it == r.by_id.end() ? nullptr : it->second;
}

absl::Status RegisterKvCodec(const KvCodec* codec) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.by_id.emplace(codec->id(), codec).second) {
    return absl::InvalidArgumentError(absl::StrCat("KV codec id ", codec->id(), " is taken"));
  }
  return absl::OkStatus();
}

}  // namespace llmrt
