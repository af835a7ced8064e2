// Adding a weight format or a KV codec is one definition plus one registration line: the toy
// INT8 format and F16 codec below are defined here, registered at run time, loaded from a
// checkpoint and run end to end by the CPU backend through its generic kernels (the formats'
// and codecs' own scalar references).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/quant/formats/builtin.h"
#include "src/quant/kv_codec.h"
#include "src/quant/weight_format.h"
#include "src/runtime/runtime.h"
#include "src/util/bf16.h"
#include "src/util/errors.h"
#include "src/util/safetensors.h"

namespace llmrt {
namespace {

namespace fs = std::filesystem;

// ---- the toy weight format: INT8 symmetric, one float32 scale per row ----------------------
// A checkpoint stores "<stem>weight" as I8 [rows, cols] and "<stem>weight_row_scale" as F32
// [rows]; w = q * scale.
constexpr WeightFormatId kToyInt8 = 16;

absl::StatusOr<std::optional<StoredMatrix>> LoadToy(const TensorSource& src, const std::string& name, int64_t rows,
                                                    int64_t cols, std::vector<std::string>* used) {
  const TensorInfo* q = src.Find(name);
  if (q == nullptr || q->dtype != DType::kI8) return std::nullopt;
  if (q->shape != std::vector<int64_t>{rows, cols}) return FormatError(name + ": wrong shape");
  auto s = formats::RequireTensor(src, name + "_row_scale", DType::kF32, {rows}, used);
  if (!s.ok()) return s.status();
  used->push_back(name);
  StoredMatrix m;
  m.format = kToyInt8;
  m.rows = rows;
  m.cols = cols;
  m.codes = formats::ViewTensor(*q, DType::kI8, {rows, cols});
  m.scales = formats::ViewTensor(**s, DType::kF32, {rows});
  return m;
}
uint64_t ToyBytes(int64_t rows, int64_t cols, const WeightParams&) { return rows * cols + rows * 4; }
void ToyDequantize(const MatrixBytes& m, int64_t row, float* out) {
  float s;
  std::memcpy(&s, m.scales + 4 * row, sizeof(s));
  for (int64_t k = 0; k < m.cols; ++k) out[k] = static_cast<float>(static_cast<int8_t>(m.codes[row * m.cols + k])) * s;
}
absl::StatusOr<StoredMatrix> ToyQuantize(const float* w, int64_t rows, int64_t cols, const WeightParams&) {
  StoredMatrix m;
  m.format = kToyInt8;
  m.rows = rows;
  m.cols = cols;
  m.codes = NewHostArray(DType::kI8, {rows, cols});
  m.scales = NewHostArray(DType::kF32, {rows});
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(w[r * cols + k]));
    const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
    std::memcpy(const_cast<uint8_t*>(m.scales.data) + 4 * r, &s, sizeof(s));
    for (int64_t k = 0; k < cols; ++k) {
      const_cast<uint8_t*>(m.codes.data)[r * cols + k] =
          static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(w[r * cols + k] / s)));
    }
  }
  return m;
}
const WeightFormatTraits kToyFormat = {kToyInt8, "INT8 per-row (test)", true, ToyBytes, ToyDequantize, LoadToy,
                                       ToyQuantize};

// ---- the toy KV codec: IEEE half precision, no scales -----------------------------------------
constexpr uint32_t kToyF16 = 100;
class F16Codec final : public KvCodec {
 public:
  uint32_t id() const override { return kToyF16; }
  const char* name() const override { return "F16 (test)"; }
  DType dtype() const override { return DType::kF16; }
  KvScaleKind scale_kind() const override { return KvScaleKind::kNone; }
  KvRowLayout Layout(const KvShape& s) const override {
    KvRowLayout l;
    l.width = s.width();
    l.row_bytes = 2 * l.width;
    return l;
  }
  void EncodeRow(const KvRowLayout& l, const float* x, float, uint8_t* row) const override {
    for (int64_t i = 0; i < l.width; ++i) {
      const _Float16 h = static_cast<_Float16>(x[i]);
      std::memcpy(row + 2 * i, &h, 2);
    }
  }
  void DecodeRow(const KvRowLayout& l, const uint8_t* row, float, float* x) const override {
    for (int64_t i = 0; i < l.width; ++i) {
      _Float16 h;
      std::memcpy(&h, row + 2 * i, 2);
      x[i] = static_cast<float>(h);
    }
  }
};

void RegisterToys() {
  static const bool done = [] {
    static const F16Codec codec;
    EXPECT_TRUE(RegisterWeightFormat(kToyFormat).ok());  // the one registration line of the format
    EXPECT_TRUE(RegisterKvCodec(&codec).ok());          // ... and of the codec
    return true;
  }();
  (void)done;
}

std::string Data(const std::string& name) { return std::string(LLMRT_TEST_DATA) + "/" + name; }

// Copies `src` into `dst` with every routed-expert matrix rewritten by `rewrite` (which appends
// the tensors that replace it).
void CopyWithExperts(const std::string& src, const fs::path& dst,
                     const std::function<void(const std::string&, const std::vector<float>&, int64_t, int64_t,
                                              std::vector<TensorToWrite>*, std::vector<std::vector<uint8_t>>*)>&
                         rewrite) {
  fs::remove_all(dst);
  fs::create_directories(dst);
  fs::copy_file(fs::path(src) / "config.json", dst / "config.json");
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<TensorToWrite> out;
  std::vector<std::vector<uint8_t>> keep;
  keep.reserve(4096);
  for (const auto& [name, t] : file->tensors()) {
    if (name.find(".mlp.experts.") != std::string::npos && t.shape.size() == 2) {
      const int64_t rows = t.shape[0], cols = t.shape[1];
      std::vector<float> w(static_cast<size_t>(rows * cols));
      ASSERT_EQ(t.dtype, DType::kBF16);
      for (size_t i = 0; i < w.size(); ++i) {
        uint16_t b;
        std::memcpy(&b, t.data + 2 * i, 2);
        w[i] = Bf16ToF32(b);
      }
      rewrite(name, w, rows, cols, &out, &keep);
      continue;
    }
    TensorToWrite o;
    o.name = name;
    o.dtype = t.dtype_name;
    o.shape = t.shape;
    o.data = t.data;
    o.bytes = t.bytes;
    out.push_back(o);
  }
  ASSERT_TRUE(WriteSafetensors((dst / "model.safetensors").string(), out).ok());
}

std::vector<std::vector<float>> Greedy(const std::string& dir, uint32_t codec, std::vector<int32_t>* tokens,
                                       RuntimeInfo* info = nullptr) {
  RuntimeOptions o;
  o.num_threads = 2;
  o.policy.kv_codec = codec;
  auto rt = Runtime::Create(dir, o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return {};
  SessionOptions so;
  so.max_new_tokens = 8;
  Session* s = *(*rt)->CreateSession(so);
  EXPECT_TRUE((*rt)->Append(s, {5, 17, 42, 99, 3, 250, 7, 11, 64}).ok());
  std::vector<std::vector<float>> logits;
  for (int step = 0; step < 20; ++step) {
    std::vector<StepResult> results;
    size_t needed = 0;
    EXPECT_TRUE((*rt)->Step(&results, 4, &needed).ok());
    for (const StepResult& r : results) {
      EXPECT_TRUE(r.status.ok()) << r.status;
      if (r.token < 0) continue;
      tokens->push_back(r.token);
      std::vector<float> row(static_cast<size_t>((*rt)->Info().vocab_size));
      size_t n = 0;
      EXPECT_TRUE((*rt)->CopyLogits(s, row.data(), row.size(), &n).ok());
      logits.push_back(std::move(row));
    }
  }
  if (info != nullptr) *info = (*rt)->Info();
  return logits;
}

float MaxDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  float d = 0.0f;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    for (size_t k = 0; k < a[i].size(); ++k) d = std::max(d, std::fabs(a[i][k] - b[i][k]));
  }
  return d;
}

// The toy format's checkpoint runs and equals the same model with those matrices dequantized to
// F32 (within float32 summation-order differences: the generic kernel dots dequantized rows,
// the F32 kernel accumulates in another order; 1e-4 on logits of magnitude ~10).
TEST(Extension, ToyWeightFormatLoadsAndRunsThroughTheGenericKernel) {
  RegisterToys();
  const fs::path tmp = fs::temp_directory_path() / ("llmrt_ext_" + std::to_string(::getpid()));
  uint64_t toy_bytes = 0;
  CopyWithExperts(Data("tiny_kimi_k2_qlora_yarn"), tmp / "toy",
                  [&](const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols,
                      std::vector<TensorToWrite>* out, std::vector<std::vector<uint8_t>>* keep) {
                    const StoredMatrix m = *ToyQuantize(w.data(), rows, cols, {});
                    keep->emplace_back(m.codes.data, m.codes.data + m.codes.bytes);
                    out->push_back({name, "I8", {rows, cols}, keep->back().data(), keep->back().size(), nullptr});
                    keep->emplace_back(m.scales.data, m.scales.data + m.scales.bytes);
                    out->push_back({name + "_row_scale", "F32", {rows}, keep->back().data(), keep->back().size(), nullptr});
                    toy_bytes += ToyBytes(rows, cols, {});
                  });
  CopyWithExperts(Data("tiny_kimi_k2_qlora_yarn"), tmp / "reference",
                  [&](const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols,
                      std::vector<TensorToWrite>* out, std::vector<std::vector<uint8_t>>* keep) {
                    const StoredMatrix m = *ToyQuantize(w.data(), rows, cols, {});
                    std::vector<float> deq(static_cast<size_t>(rows * cols));
                    const MatrixBytes b{m.codes.data, m.scales.data, rows, cols, {}};
                    for (int64_t r = 0; r < rows; ++r) ToyDequantize(b, r, deq.data() + r * cols);
                    keep->emplace_back(reinterpret_cast<uint8_t*>(deq.data()),
                                       reinterpret_cast<uint8_t*>(deq.data() + deq.size()));
                    out->push_back({name, "F32", {rows, cols}, keep->back().data(), keep->back().size(), nullptr});
                  });
  std::vector<int32_t> toy_tokens, ref_tokens;
  RuntimeInfo info;
  const auto toy = Greedy((tmp / "toy").string(), kKvCodecF32, &toy_tokens, &info);
  const auto ref = Greedy((tmp / "reference").string(), kKvCodecF32, &ref_tokens);
  ASSERT_EQ(toy.size(), 8u);
  EXPECT_EQ(toy_tokens, ref_tokens);
  EXPECT_LT(MaxDiff(toy, ref), 1e-4f);
  EXPECT_EQ(info.resident_weight_bytes[kToyInt8], toy_bytes);
  fs::remove_all(tmp);
}

// The toy F16 codec stores the cache and runs attention through the codec's own reference.
// Against the exact F32 codec its logits move less than the built-in BF16 codec's do (11
// significant bits against 8) and greedy tokens agree.
TEST(Extension, ToyKvCodecRunsThroughTheGenericPath) {
  RegisterToys();
  std::vector<int32_t> f16_tokens, f32_tokens, bf16_tokens;
  RuntimeInfo info;
  const auto f16 = Greedy(Data("tiny_kimi_k2_qlora_yarn"), kToyF16, &f16_tokens, &info);
  const auto f32 = Greedy(Data("tiny_kimi_k2_qlora_yarn"), kKvCodecF32, &f32_tokens);
  const auto bf16 = Greedy(Data("tiny_kimi_k2_qlora_yarn"), kKvCodecBf16, &bf16_tokens);
  ASSERT_EQ(f16.size(), 8u);
  EXPECT_EQ(f16_tokens, f32_tokens);
  EXPECT_GT(MaxDiff(f16, f32), 0.0f);  // it did store half precision
  EXPECT_LT(MaxDiff(f16, f32), MaxDiff(bf16, f32));
  EXPECT_EQ(info.kv_codec, kToyF16);
  EXPECT_EQ(info.kv_bytes_per_token, static_cast<uint64_t>(info.num_layers) * 2 * (32 + 16));
}

}  // namespace
}  // namespace llmrt
