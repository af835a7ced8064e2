// Synthetic weights made part by part: a part equals the same part of the whole matrix, bit for
// bit, in every synthetic format (what lets a tensor-parallel rank, or a device, make only its
// slice); the values are those the generator has always made (known answers, from an
// independent model of the arithmetic); the loader counts the whole matrix whatever part it
// makes, and dequantizes parts that straddle FP8 blocks.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/registry.h"
#include "src/model/checkpoint.h"
#include "src/model/synthetic.h"
#include "src/model/weights.h"
#include "src/quant/synthetic_values.h"
#include "src/quant/synthetic_weights.h"
#include "src/quant/weight_format.h"

namespace llmrt {
namespace {

constexpr uint64_t kSeed = 7;
const std::string kName = "model.layers.1.mlp.experts.3.down_proj.weight";

SyntheticMatrixSpec Spec(WeightFormatId format, int64_t rows, int64_t cols, WeightParams params = {}) {
  SyntheticMatrixSpec s;
  s.name = kName;
  s.stream = SyntheticStream(kSeed, kName);
  s.format = format;
  s.params = params;
  s.rows = s.part_rows = rows;
  s.cols = s.part_cols = cols;
  return s;
}

SyntheticMatrixSpec Part(SyntheticMatrixSpec s, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  s.row0 = r0;
  s.part_rows = nr;
  s.col0 = c0;
  s.part_cols = nc;
  return s;
}

std::vector<uint8_t> Bytes(const HostArray& a) { return std::vector<uint8_t>(a.data, a.data + a.bytes); }

// FNV-1a 64 of an array's bytes.
uint64_t Fnv(const HostArray& a) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < a.bytes; ++i) h = (h ^ a.data[i]) * 0x100000001b3ull;
  return h;
}

void ExpectSameArray(const HostArray& got, const HostArray& want, const char* what) {
  EXPECT_EQ(got.dtype, want.dtype) << what;
  EXPECT_EQ(got.shape, want.shape) << what;
  ASSERT_EQ(got.bytes, want.bytes) << what;
  EXPECT_TRUE(Bytes(got) == Bytes(want)) << what << ": bytes differ";
}

// Every part in `parts` ({r0, nr, c0, nc}) made alone equals the format's slice of the whole.
void ExpectPartsAreSlices(const SyntheticMatrixSpec& whole_spec, const std::vector<std::vector<int64_t>>& parts) {
  absl::StatusOr<StoredMatrix> whole = MakeSyntheticPart(whole_spec);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const WeightFormatTraits& f = WeightFormatOf(whole_spec.format);
  for (const std::vector<int64_t>& p : parts) {
    SCOPED_TRACE(::testing::Message() << f.name << " rows [" << p[0] << ", +" << p[1] << ") cols [" << p[2] << ", +"
                                      << p[3] << ")");
    absl::StatusOr<StoredMatrix> want = f.slice(*whole, p[0], p[1], p[2], p[3]);
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<StoredMatrix> got = MakeSyntheticPart(Part(whole_spec, p[0], p[1], p[2], p[3]));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->format, want->format);
    EXPECT_EQ(got->rows, want->rows);
    EXPECT_EQ(got->cols, want->cols);
    ExpectSameArray(got->codes, want->codes, "codes");
    ExpectSameArray(got->scales, want->scales, "scales");
  }
}

TEST(SyntheticWeights, ConstantsAreTheirFloatExpressions) {
  EXPECT_EQ(synthetic::kHalfWidth, synthetic::kStd * std::sqrt(3.0f));
  EXPECT_EQ(synthetic::kFp8ScaleUnit, synthetic::kHalfWidth / Fp8E4M3::kMax);
  EXPECT_EQ(synthetic::kInt4ScaleUnit, synthetic::kStd / std::sqrt(56.0f / 3.0f));
}

// FNV-1a hashes of a [40, 96] matrix's codes and scales as the generator made them before it
// made parts (computed by a Python model of that code, float32 rounding emulated).
TEST(SyntheticWeights, KnownAnswers) {
  struct Case {
    WeightFormatId format;
    WeightParams params;
    uint64_t codes, scales;
  };
  WeightParams fp8, int4;
  fp8.block_rows = 16;
  fp8.block_cols = 32;
  int4.group = 32;
  for (const Case& k : {Case{kWeightBf16, {}, 0x9235a229ac6446deull, 0xcbf29ce484222325ull},
                        Case{kWeightFp8Block, fp8, 0xe5640794a98559c1ull, 0x7986ba9a26346da6ull},
                        Case{kWeightInt4Group, int4, 0xab6e5a0a06290d99ull, 0x98d2c25046efc280ull}}) {
    SCOPED_TRACE(WeightFormatOf(k.format).name);
    absl::StatusOr<StoredMatrix> m = MakeSyntheticPart(Spec(k.format, 40, 96, k.params));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(Fnv(m->codes), k.codes);
    EXPECT_EQ(Fnv(m->scales), k.scales);
  }
}

TEST(SyntheticWeights, Bf16PartIsTheSliceOfTheWhole) {
  ExpectPartsAreSlices(Spec(kWeightBf16, 200, 320),
                       {{37, 91, 0, 320}, {0, 200, 33, 100}, {5, 7, 300, 20}, {199, 1, 319, 1}, {0, 200, 0, 320}});
}

TEST(SyntheticWeights, Fp8PartIsTheSliceOfTheWhole) {
  WeightParams p;
  p.block_rows = 64;
  p.block_cols = 128;
  // 200 rows: the last row block has 8 rows; 320 columns: the last column block 64.
  ExpectPartsAreSlices(Spec(kWeightFp8Block, 200, 320, p), {{64, 64, 0, 320},
                                                            {128, 72, 0, 320},
                                                            {0, 200, 128, 128},
                                                            {0, 200, 256, 64},
                                                            {64, 136, 128, 192},
                                                            {192, 8, 256, 64}});
}

TEST(SyntheticWeights, Int4PartIsTheSliceOfTheWhole) {
  WeightParams p;
  p.group = 32;
  ExpectPartsAreSlices(Spec(kWeightInt4Group, 200, 320, p),
                       {{3, 47, 0, 320}, {0, 200, 64, 96}, {101, 99, 288, 32}, {0, 1, 0, 32}});
}

TEST(SyntheticWeights, PartsOffTheFormatsBlocksAreRefusedAsItsSliceRefusesThem) {
  WeightParams fp8, int4;
  fp8.block_rows = 64;
  fp8.block_cols = 128;
  int4.group = 32;
  const SyntheticMatrixSpec f = Spec(kWeightFp8Block, 200, 320, fp8);
  absl::StatusOr<StoredMatrix> whole = MakeSyntheticPart(f);
  ASSERT_TRUE(whole.ok());
  for (const std::vector<int64_t>& p : std::vector<std::vector<int64_t>>{{10, 54, 0, 320}, {0, 100, 0, 320},
                                                                           {0, 200, 64, 128}}) {
    const absl::Status got = MakeSyntheticPart(Part(f, p[0], p[1], p[2], p[3])).status();
    const absl::Status want = WeightFormatOf(kWeightFp8Block).slice(*whole, p[0], p[1], p[2], p[3]).status();
    EXPECT_EQ(got.code(), absl::StatusCode::kFailedPrecondition) << got;
    EXPECT_EQ(got, want);
  }
  const absl::Status int4_cols = MakeSyntheticPart(Part(Spec(kWeightInt4Group, 8, 320, int4), 0, 8, 16, 64)).status();
  EXPECT_EQ(int4_cols.code(), absl::StatusCode::kFailedPrecondition) << int4_cols;
  EXPECT_NE(int4_cols.message().find("INT4 groups of 32"), std::string::npos) << int4_cols;

  const absl::Status outside = MakeSyntheticPart(Part(Spec(kWeightBf16, 8, 8), 4, 8, 0, 8)).status();
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument) << outside;
  EXPECT_NE(outside.message().find(kName), std::string::npos) << outside;
  int4.group = 48;
  const absl::Status group = MakeSyntheticPart(Spec(kWeightInt4Group, 8, 64, int4)).status();
  EXPECT_EQ(group.code(), absl::StatusCode::kDataLoss) << group;
  EXPECT_NE(group.message().find(kName), std::string::npos) << group;
}

// The loader over a synthetic FP8 checkpoint (the tiny Kimi K2 FP8 config: 64 x 64 blocks).
class SyntheticLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Checkpoint> ck = Checkpoint::Synthetic(std::string(LLMRT_TEST_DATA) + "/tiny_kimi_k2_fp8", 3);
    ASSERT_TRUE(ck.ok()) << ck.status();
    ck_ = std::make_unique<Checkpoint>(*std::move(ck));
    BackendOptions options;
    options.num_threads = 1;
    absl::StatusOr<std::unique_ptr<Backend>> be = CreateBackend(BackendKind::kCpu, options);
    ASSERT_TRUE(be.ok()) << be.status();
    be_ = *std::move(be);
  }
  std::unique_ptr<Checkpoint> ck_;
  std::unique_ptr<Backend> be_;
};

// Counted as the whole matrix the checkpoint would store; resident as the part that was made.
TEST_F(SyntheticLoader, CountsTheWholeMatrixAndHoldsThePart) {
  WeightLoader loader(*ck_, *be_);
  const std::string name = "model.layers.1.self_attn.o_proj.weight";  // FP8 [128, 128]
  absl::StatusOr<Weight> w = loader.Matrix(name, 128, 128, MatrixSlice::Cols(64, 64));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->rows, 128);
  EXPECT_EQ(w->cols, 64);
  EXPECT_EQ(loader.num_parameters(), 128u * 128u);
  EXPECT_EQ(loader.weight_bytes(), 128u * 128u + 4u * 4u);  // codes + 2 x 2 float32 block scales
  EXPECT_EQ(loader.resident_bytes()[kWeightFp8Block], 128u * 64u + 2u * 4u);

  // A part the 64 x 64 blocks straddle is refused naming the tensor, as a checkpoint's would be.
  const absl::Status off = loader.Matrix(name, 128, 128, MatrixSlice::Cols(32, 64)).status();
  EXPECT_EQ(off.code(), absl::StatusCode::kInvalidArgument) << off;
  EXPECT_NE(off.message().find("cannot be split over tensor_parallel"), std::string::npos) << off;
  EXPECT_NE(off.message().find(name), std::string::npos) << off;
}

// Dense parts need not fall on blocks: the rows are those of the whole matrix, dequantized.
TEST_F(SyntheticLoader, DenseRowsOfAnFp8PartThatStraddlesBlocks) {
  WeightLoader loader(*ck_, *be_);
  const std::string name = "model.layers.1.self_attn.kv_b_proj.weight";  // FP8 [256, 64]
  absl::StatusOr<Weight> w = loader.Dense(name, 256, 64, MatrixSlice::Rows(40, 100));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->format, kWeightF32);
  ASSERT_EQ(w->rows, 100);
  std::vector<float> got(100 * 64);
  ASSERT_TRUE(be_->Download(w->data, got.data(), got.size() * sizeof(float)).ok());
  absl::StatusOr<StoredMatrix> whole = MakeSyntheticMatrix(ck_->config(), 3, name, 256, 64);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->format, kWeightFp8Block);
  const MatrixBytes bytes{whole->codes.data, whole->scales.data, 256, 64, whole->params};
  std::vector<float> row(64);
  for (int64_t r = 0; r < 100; ++r) {
    WeightFormatOf(kWeightFp8Block).dequantize_row(bytes, 40 + r, row.data());
    ASSERT_EQ(0, std::memcmp(row.data(), got.data() + r * 64, 64 * sizeof(float))) << "row " << 40 + r;
  }
  EXPECT_EQ(loader.num_parameters(), 256u * 64u);
}

}  // namespace
}  // namespace llmrt
