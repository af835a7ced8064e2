#include "tests/backend/harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "src/quant/fp8.h"
#include "src/util/bf16.h"

namespace llmrt::conformance {

void MustOk(const absl::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.ToString());
}

std::vector<float> RandomNormal(size_t n, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> RoundToBf16(std::vector<float> v) {
  for (float& x : v) x = Bf16ToF32(F32ToBf16(x));
  return v;
}

std::vector<uint16_t> ToBf16Bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = F32ToBf16(v[i]);
  return b;
}

namespace {

uint8_t* Mutable(const HostArray& a) { return const_cast<uint8_t*>(a.data); }
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string HostMatrix::Describe() const {
  const WeightFormatTraits& t = WeightFormatOf(stored.format);
  return absl::StrCat(t.name, " [", stored.rows, ", ", stored.cols, "] block ", stored.params.block_rows, "x",
                      stored.params.block_cols, " group ", stored.params.group);
}

std::vector<float> DequantizeReference(const StoredMatrix& m) {
  MatrixBytes b;
  b.codes = m.codes.data;
  b.scales = m.scales.data;
  b.rows = m.rows;
  b.cols = m.cols;
  b.params = m.params;
  std::vector<float> dense(static_cast<size_t>(m.rows * m.cols));
  const WeightFormatTraits& t = WeightFormatOf(m.format);
  for (int64_t r = 0; r < m.rows; ++r) t.dequantize_row(b, r, dense.data() + r * m.cols);
  return dense;
}

HostMatrix MakeHostMatrix(WeightFormatId format, int64_t rows, int64_t cols, const WeightParams& params,
                          std::mt19937& rng) {
  HostMatrix h;
  StoredMatrix& m = h.stored;
  m.format = format;
  m.rows = rows;
  m.cols = cols;
  m.params = params;
  const size_t n = static_cast<size_t>(rows * cols);
  if (format == kWeightF32) {
    m.codes = NewHostArray(DType::kF32, {rows, cols});
    const std::vector<float> v = RandomNormal(n, rng);
    std::memcpy(Mutable(m.codes), v.data(), n * sizeof(float));
  } else if (format == kWeightBf16) {
    m.codes = NewHostArray(DType::kBF16, {rows, cols});
    const std::vector<uint16_t> v = ToBf16Bits(RandomNormal(n, rng));
    std::memcpy(Mutable(m.codes), v.data(), n * sizeof(uint16_t));
  } else if (format == kWeightFp8Block) {
    m.codes = NewHostArray(DType::kF8E4M3, {rows, cols});
    uint8_t* q = Mutable(m.codes);
    for (size_t i = 0; i < n; ++i) {
      uint8_t b = static_cast<uint8_t>(rng() & 0xFF);
      if ((b & 0x7F) == Fp8E4M3::kNaN) b &= 0xFE;  // every code but NaN (448 instead)
      q[i] = b;
    }
    const int64_t sr = CeilDiv(rows, params.block_rows), sc = CeilDiv(cols, params.block_cols);
    m.scales = NewHostArray(DType::kF32, {sr, sc});
    auto* s = reinterpret_cast<float*>(Mutable(m.scales));
    for (int64_t i = 0; i < sr * sc; ++i) {
      s[i] = std::ldexp(1.0f + static_cast<float>(rng() % 128) / 128.0f, -static_cast<int>(rng() % 9) - 4);
    }
  } else if (format == kWeightInt4Group) {
    m.codes = NewHostArray(DType::kU8, {rows, cols / 2});
    uint8_t* q = Mutable(m.codes);
    for (size_t i = 0; i < n / 2; ++i) q[i] = static_cast<uint8_t>(rng() & 0xFF);  // every nibble, -8..7
    m.scales = NewHostArray(DType::kBF16, {rows, cols / params.group});
    auto* s = reinterpret_cast<uint16_t*>(Mutable(m.scales));
    for (int64_t i = 0; i < rows * (cols / params.group); ++i) {
      s[i] = F32ToBf16(std::ldexp(1.0f + static_cast<float>(rng() % 128) / 128.0f, -static_cast<int>(rng() % 6) - 2));
    }
  } else {
    throw std::runtime_error(absl::StrCat("the conformance suite has no generator for weight format ", format));
  }
  h.dense = DequantizeReference(m);
  return h;
}

std::vector<FormatCase> FormatCases(int64_t cols) {
  std::vector<FormatCase> cases;
  cases.push_back({kWeightF32, {}, "F32"});
  cases.push_back({kWeightBf16, {}, "BF16"});
  WeightParams p;
  p.block_rows = 128;
  p.block_cols = 128;
  cases.push_back({kWeightFp8Block, p, "FP8 128x128"});
  p.block_rows = 3;
  p.block_cols = 7;
  cases.push_back({kWeightFp8Block, p, "FP8 3x7"});
  p.block_rows = 5;
  p.block_cols = 16;
  cases.push_back({kWeightFp8Block, p, "FP8 5x16"});
  for (int64_t g : {32, 128}) {
    if (cols % g != 0) continue;
    WeightParams q;
    q.group = g;
    cases.push_back({kWeightInt4Group, q, absl::StrCat("INT4 g", g)});
  }
  return cases;
}

int64_t HostBatch::Slot(int64_t s, int64_t p) const {
  return static_cast<int64_t>(pages[s][p / page_size]) * page_size + p % page_size;
}

HostBatch MakeHostBatch(const std::vector<std::pair<int64_t, int64_t>>& seqs, int64_t page_size, int64_t num_pages,
                        std::mt19937& rng) {
  HostBatch b;
  b.page_size = page_size;
  std::vector<int32_t> pool(static_cast<size_t>(num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  size_t next = 0;
  b.seq_page_start.push_back(0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto [hist, n] = seqs[s];
    if (n < 1) throw std::runtime_error("every sequence of a pass has at least one token");
    b.history.push_back(hist);
    b.new_tokens.push_back(n);
    const int64_t npages = CeilDiv(hist + n, page_size);
    if (next + static_cast<size_t>(npages) > pool.size()) throw std::runtime_error("the page pool is too small");
    b.pages.emplace_back(pool.begin() + next, pool.begin() + next + npages);
    next += static_cast<size_t>(npages);
    for (int32_t p : b.pages.back()) b.page_ids.push_back(p);
    b.seq_page_start.push_back(static_cast<int32_t>(b.page_ids.size()));
    b.seq_first_token.push_back(static_cast<int32_t>(b.token_seq.size()));
    b.seq_tokens.push_back(static_cast<int32_t>(n));
    b.seq_ctx.push_back(static_cast<int32_t>(hist + n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = hist + i;
      b.token_seq.push_back(static_cast<int32_t>(s));
      b.token_ctx.push_back(static_cast<int32_t>(p + 1));
      b.positions.push_back(static_cast<int32_t>(p));
      b.slot_mapping.push_back(static_cast<int32_t>(b.Slot(static_cast<int64_t>(s), p)));
    }
  }
  return b;
}

::testing::AssertionResult AllNear(const std::vector<float>& got, const std::vector<double>& want,
                                   const std::vector<double>& tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (tol[i] > 0) worst = std::max(worst, err / tol[i]);
    if (!(err <= tol[i])) {  // NaN fails too
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i]
                                           << " (error " << err << ", tolerance " << tol[i] << ")";
    }
  }
  // LLMRT_CONFORMANCE_VERBOSE=1 prints how close each comparison came to its tolerance (for
  // judging tolerances on a new backend).
  static const bool verbose = std::getenv("LLMRT_CONFORMANCE_VERBOSE") != nullptr;
  if (verbose) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::fprintf(stderr, "[ tolerance ] %s.%s: worst error / tolerance = %.3g over %zu values\n", info->test_suite_name(),
                 info->name(), worst, got.size());
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult AllBitEqual(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<const KvCodec*> AllKvCodecs() {
  std::vector<const KvCodec*> codecs;
  for (uint32_t id = 0; id < 64; ++id) {
    if (const KvCodec* c = FindKvCodec(id); c != nullptr) codecs.push_back(c);
  }
  return codecs;
}

KvShape MlaKvShape(int64_t num_layers, int64_t kv_lora, int64_t rope, int64_t index_dim, int64_t tile,
                   int64_t index_tile) {
  KvShape s;
  s.num_layers = num_layers;
  s.parts.push_back({kv_lora, tile, false});
  s.parts.push_back({rope, 128, true});
  if (index_dim > 0) s.parts.push_back({index_dim, index_tile, false});
  return s;
}

KvShape GqaKvShape(int64_t num_layers, int64_t kv_heads, int64_t head_dim) {
  KvShape s;
  s.num_layers = num_layers;
  s.parts.push_back({kv_heads * head_dim, head_dim, false});
  s.parts.push_back({kv_heads * head_dim, head_dim, false});
  return s;
}

std::vector<float> CodecRoundTrip(const KvCodec& codec, const KvRowLayout& layout, const float* x, float scale) {
  std::vector<uint8_t> row(static_cast<size_t>(layout.row_bytes));
  std::vector<float> out(static_cast<size_t>(layout.width));
  codec.EncodeRow(layout, x, scale, row.data());
  codec.DecodeRow(layout, row.data(), scale, out.data());
  return out;
}

size_t KvRowOffset(const KvCacheView& v, int64_t slot, int64_t layer) {
  const int64_t page = slot / v.page_size, row = slot % v.page_size;
  return static_cast<size_t>(((page * v.num_layers + layer) * v.page_size + row) * v.row_bytes);
}

Tensor UploadF32(Backend& be, const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  Tensor t = Must(be.Allocate(DType::kF32, shape), "Allocate");
  if (static_cast<size_t>(t.numel()) != v.size()) throw std::runtime_error("UploadF32: size does not match the shape");
  MustOk(be.Upload(v.data(), v.size() * sizeof(float), t), "Upload");
  return t;
}

Tensor UploadI32(Backend& be, const std::vector<int32_t>& v) {
  Tensor t = Must(be.Allocate(DType::kI32, {static_cast<int64_t>(v.size())}), "Allocate");
  MustOk(be.Upload(v.data(), v.size() * sizeof(int32_t), t), "Upload");
  return t;
}

AttentionBatch UploadBatch(Backend& be, const HostBatch& b, Tensor* positions) {
  std::vector<int32_t> all;
  std::vector<std::pair<int64_t, int64_t>> spans;  // (offset, count)
  for (const std::vector<int32_t>* v : {&b.token_seq, &b.token_ctx, &b.slot_mapping, &b.seq_page_start,
                                        &b.seq_first_token, &b.page_ids, &b.positions}) {
    spans.emplace_back(static_cast<int64_t>(all.size()), static_cast<int64_t>(v->size()));
    all.insert(all.end(), v->begin(), v->end());
  }
  const Tensor t = UploadI32(be, all);  // one metadata upload, as a step makes
  auto view = [&](int i) { return t.Rows(spans[i].first, spans[i].first + spans[i].second); };
  AttentionBatch a;
  a.token_seq = view(0);
  a.token_ctx = view(1);
  a.slot_mapping = view(2);
  a.seq_page_start = view(3);
  a.seq_first_token = view(4);
  a.page_ids = view(5);
  if (positions != nullptr) *positions = view(6);
  a.num_tokens = b.num_tokens();
  a.num_seqs = b.num_seqs();
  a.max_ctx = *std::max_element(b.token_ctx.begin(), b.token_ctx.end());
  // The host facts a step gives (StepBatch::UploadTo), but `decode`, which a test sets.
  for (const int32_t c : b.token_ctx) a.total_ctx += c;
  for (int64_t s = 0; s < a.num_seqs && b.seq_first_token.size() == static_cast<size_t>(a.num_seqs); ++s) {
    const int64_t n = (s + 1 < a.num_seqs ? b.seq_first_token[s + 1] : a.num_tokens) - b.seq_first_token[s];
    a.min_seq_tokens = s == 0 ? n : std::min(a.min_seq_tokens, n);
  }
  if (b.seq_tokens.size() == static_cast<size_t>(a.num_seqs) && b.seq_ctx.size() == b.seq_tokens.size()) {
    a.host_seq_tokens = b.seq_tokens.data();
    a.host_seq_ctx = b.seq_ctx.data();
  }
  return a;
}

void KvWriteParts(Backend& be, const KvCacheView& v, int64_t layer, const std::vector<Tensor>& p,
                  const AttentionBatch& batch) {
  switch (p.size()) {
    case 1: be.KvWrite(v, layer, {p[0]}, batch); break;
    case 2: be.KvWrite(v, layer, {p[0], p[1]}, batch); break;
    case 3: be.KvWrite(v, layer, {p[0], p[1], p[2]}, batch); break;
    default: throw std::runtime_error("KvWriteParts: one to three parts");
  }
}

void KvCalibrateParts(Backend& be, const KvCacheView& v, int64_t layer, const std::vector<Tensor>& p) {
  switch (p.size()) {
    case 1: be.KvCalibrate(v, layer, {p[0]}); break;
    case 2: be.KvCalibrate(v, layer, {p[0], p[1]}); break;
    case 3: be.KvCalibrate(v, layer, {p[0], p[1], p[2]}); break;
    default: throw std::runtime_error("KvCalibrateParts: one to three parts");
  }
}

std::string BackendParamName(const ::testing::TestParamInfo<BackendKind>& info) {
  return BackendKindName(info.param);
}

void BackendTest::SetUp() {
  BackendOptions options;
  options.num_threads = 3;  // more workers than this machine's cores: splits, no idle shortcut
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(GetParam(), options);
  if (!b.ok()) {
    if (b.status().code() == absl::StatusCode::kUnimplemented) {
      GTEST_SKIP() << "no " << BackendKindName(GetParam()) << " backend here: " << b.status().message();
    }
    FAIL() << b.status();
  }
  be_ = *std::move(b);
}

void BackendTest::TearDown() {
  if (be_ == nullptr) return;
  const absl::Status s = be_->Synchronize();
  EXPECT_TRUE(s.ok()) << "an op failed: " << s;
}

Tensor BackendTest::NewTensor(DType dtype, std::initializer_list<int64_t> shape) {
  return Must(be().Allocate(dtype, shape), "Allocate");
}

Tensor BackendTest::F32(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return UploadF32(be(), v, shape);
}

Tensor BackendTest::F32View(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t pad_cols,
                            Tensor* parent) {
  if (pad_cols == 0) {
    Tensor t = F32(v, {rows, cols});
    if (parent != nullptr) *parent = t;
    return t;
  }
  const int64_t ld = cols + pad_cols;
  std::vector<float> full(static_cast<size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < rows; ++r) std::copy_n(v.data() + r * cols, cols, full.data() + r * ld + 1);
  Tensor p = F32(full, {rows, ld});
  if (parent != nullptr) *parent = p;
  return p.Cols(1, 1 + cols);
}

Tensor BackendTest::I32(const std::vector<int32_t>& v) { return UploadI32(be(), v); }

std::vector<float> BackendTest::ReadF32(const Tensor& t) {
  MustOk(be().Synchronize(), "an op before this read failed");
  std::vector<float> v(static_cast<size_t>(t.numel()));
  MustOk(be().Download(t, v.data(), v.size() * sizeof(float)), "Download");
  return v;
}

std::vector<int32_t> BackendTest::ReadI32(const Tensor& t) {
  MustOk(be().Synchronize(), "an op before this read failed");
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  MustOk(be().Download(t, v.data(), v.size() * sizeof(int32_t)), "Download");
  return v;
}

std::vector<uint8_t> BackendTest::ReadBytes(const Tensor& t) {
  MustOk(be().Synchronize(), "an op before this read failed");
  std::vector<uint8_t> v(t.bytes());
  MustOk(be().Download(t, v.data(), v.size()), "Download");
  return v;
}

std::vector<float> BackendTest::ColumnBlock(const std::vector<float>& m, int64_t ld, int64_t c0, int64_t n) {
  const int64_t rows = static_cast<int64_t>(m.size()) / ld;
  std::vector<float> out(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(m.data() + r * ld + c0, n, out.data() + r * n);
  return out;
}

Weight BackendTest::Vector(const std::vector<float>& v, bool bf16) {
  const int64_t n = static_cast<int64_t>(v.size());
  HostArray a = NewHostArray(bf16 ? DType::kBF16 : DType::kF32, {n});
  if (bf16) {
    const std::vector<uint16_t> b = ToBf16Bits(v);
    std::memcpy(const_cast<uint8_t*>(a.data), b.data(), b.size() * sizeof(uint16_t));
  } else {
    std::memcpy(const_cast<uint8_t*>(a.data), v.data(), v.size() * sizeof(float));
  }
  Weight w;
  w.format = bf16 ? kWeightBf16 : kWeightF32;
  w.rows = n;
  w.cols = 1;
  const int64_t shape[1] = {n};
  w.data = Must(be().ImportHost(a.keepalive, a.data, a.dtype, shape, 1), "ImportHost");
  return w;
}

std::vector<const KvCodec*> BackendTest::KvCodecs() {
  std::vector<const KvCodec*> codecs;
  for (const KvCodec* c : AllKvCodecs()) {
    if (be().SupportsKvCodec(*c)) {
      codecs.push_back(c);
    } else {
      RecordProperty(std::string("refused_kv_codec_") + c->name(), "UNSUPPORTED");
    }
  }
  return codecs;
}

bool BackendTest::Prepare(const HostMatrix& m, Weight* w) {
  absl::StatusOr<Weight> r = be().PrepareWeight(m.stored);
  if (!r.ok() && r.status().code() == absl::StatusCode::kUnimplemented && !be().SupportsWeightFormat(m.stored.format)) {
    RecordProperty("refused_format", m.Describe());
    return false;
  }
  *w = Must(std::move(r), "PrepareWeight");
  return true;
}

}  // namespace llmrt::conformance
