// The backend conformance harness: every op of src/backend/backend.h, on every backend the
// registry can create here, against a scalar reference written in the test from the op's
// documented definition (llama.cpp's tests/test-backend-ops.cpp is the model: a new backend is
// done when this suite is green on it).
//
// Parameterization. Each op test is a TEST_P of a fixture derived from BackendTest; the fixture
// is instantiated for every BackendKind that can exist ({kCpu, kCuda}), named by
// BackendKindName ("cpu", "cuda"). SetUp creates the backend through the registry and skips the
// instance when CreateBackend answers UNSUPPORTED (a kind not built, or no device here), so a
// backend registered later joins the suite without touching it. tests/CMakeLists.txt discovers
// the one executable twice: the "*/cuda" instances with the ctest label `gpu` (device runs),
// everything else (CPU instances and the per-Highway-target kernel tests) with `backend`.
//
// Tolerances are stated where they are used; `kU` is float32's unit roundoff 2^-24. Exact
// equality is asserted wherever the math is exact (data movement, float additions of two
// values, codec bytes, top-k indices). LLMRT_CONFORMANCE_VERBOSE=1 in the environment prints,
// for every tolerance comparison, the worst error as a fraction of its tolerance.
#ifndef LLMRT_TESTS_BACKEND_HARNESS_H_
#define LLMRT_TESTS_BACKEND_HARNESS_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "src/backend/backend.h"
#include "src/backend/registry.h"
#include "src/kv/kv_store.h"
#include "src/quant/kv_codec.h"
#include "src/quant/weight_format.h"

namespace llmrt::conformance {

// float32 unit roundoff: a correctly rounded operation has relative error at most kU.
inline constexpr double kU = 0x1p-24;

// Throws on error, so that a failed setup step fails the test with the status message (gtest
// reports exceptions escaping a test body as failures).
template <typename T>
T Must(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) throw std::runtime_error(std::string(what) + ": " + v.status().ToString());
  return *std::move(v);
}
void MustOk(const absl::Status& s, const char* what);

std::vector<float> RandomNormal(size_t n, std::mt19937& rng, float stddev = 1.0f);
// Values rounded to bfloat16 (what a BF16 table or weight holds).
std::vector<float> RoundToBf16(std::vector<float> v);
std::vector<uint16_t> ToBf16Bits(const std::vector<float>& v);

// A weight matrix built in host memory in one format (random codes and scales), and the
// dense float32 matrix its format's scalar reference (WeightFormatTraits::dequantize_row)
// decodes it to.
struct HostMatrix {
  StoredMatrix stored;
  std::vector<float> dense;  // [rows, cols]
  std::string Describe() const;
};
// The built-in formats: F32 and BF16 random normal; FP8 block every e4m3 code but NaN with
// block scales 2^-k * (1 + f) (params.block_rows / block_cols, partial blocks allowed); INT4
// every nibble with bfloat16 group scales (params.group, a multiple of 32 dividing cols).
HostMatrix MakeHostMatrix(WeightFormatId format, int64_t rows, int64_t cols, const WeightParams& params,
                          std::mt19937& rng);
// The dense reference of a stored matrix through its format's dequantize_row.
std::vector<float> DequantizeReference(const StoredMatrix& m);

// One test-configuration of a weight format: format, params, a name for messages.
struct FormatCase {
  WeightFormatId format;
  WeightParams params;
  std::string name;
};
// Every built-in format with the parameters the suite covers: F32, BF16, FP8 blocks 128x128,
// 3x7 and 5x16 (odd, partial blocks), INT4 groups 32 and 128. `cols` restricts INT4 cases to
// groups dividing it.
std::vector<FormatCase> FormatCases(int64_t cols);

// A paged attention batch as src/runtime/step_batch.cc builds one: sequence s has
// `history[s]` positions cached before this pass and writes `new_tokens[s]` positions in it,
// owning pages[s] (enough for its positions; page ids in any order).
struct HostBatch {
  std::vector<int64_t> history, new_tokens;
  std::vector<std::vector<int32_t>> pages;
  int64_t page_size = 0;
  // The AttentionBatch fields in host memory.
  std::vector<int32_t> token_seq, token_ctx, seq_page_start, page_ids, slot_mapping, seq_first_token, positions;
  std::vector<int32_t> seq_tokens, seq_ctx;  // AttentionBatch::host_seq_tokens / host_seq_ctx
  int64_t num_tokens() const { return static_cast<int64_t>(token_seq.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(history.size()); }
  // Cache slot (page * page_size + row) of position p of sequence s.
  int64_t Slot(int64_t s, int64_t p) const;
};
// Sequences (history, new tokens) with pages drawn from a shuffled pool of `num_pages`.
HostBatch MakeHostBatch(const std::vector<std::pair<int64_t, int64_t>>& seqs, int64_t page_size, int64_t num_pages,
                        std::mt19937& rng);

// Every registered KV codec (the built-ins: F32, BF16, FP8 per-layer, FP8 tiled).
std::vector<const KvCodec*> AllKvCodecs();
// MLA's cached row: latent [kv_lora] (FP8 tiles of `tile`), k_rope [rope] kept in BF16 by
// quantizing codecs, and GLM-5's indexer key [index_dim] when > 0 (tiles of `index_tile`).
KvShape MlaKvShape(int64_t num_layers, int64_t kv_lora, int64_t rope, int64_t index_dim, int64_t tile = 128,
                   int64_t index_tile = 128);
// GQA's cached row: keys then values of kv_heads heads, one tile per head.
KvShape GqaKvShape(int64_t num_layers, int64_t kv_heads, int64_t head_dim);
// The values of one row as a codec stores and reads them back: DecodeRow(EncodeRow(x)).
std::vector<float> CodecRoundTrip(const KvCodec& codec, const KvRowLayout& layout, const float* x, float scale);

// Byte offset of cache row `slot` (page * page_size + row) of `layer` in a KvCacheView's pages
// [num_pages, num_layers, page_size, row_bytes].
size_t KvRowOffset(const KvCacheView& v, int64_t slot, int64_t layer);

// Host data into backend memory (throw on failure).
Tensor UploadF32(Backend& be, const std::vector<float>& v, std::initializer_list<int64_t> shape);
Tensor UploadI32(Backend& be, const std::vector<int32_t>& v);
// The AttentionBatch of a host batch through one metadata upload (as a step makes), and the
// positions tensor when asked.
AttentionBatch UploadBatch(Backend& be, const HostBatch& b, Tensor* positions = nullptr);

// KvWrite / KvCalibrate with a runtime list of parts (the ops take an initializer_list).
void KvWriteParts(Backend& be, const KvCacheView& v, int64_t layer, const std::vector<Tensor>& parts,
                  const AttentionBatch& batch);
void KvCalibrateParts(Backend& be, const KvCacheView& v, int64_t layer, const std::vector<Tensor>& parts);

class BackendTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override;
  void TearDown() override;
  Backend& be() { return *be_; }

  // Device tensors. Rank 1 or 2 shapes; `pad_cols` > 0 returns the first `cols` columns of a
  // [rows, cols + pad_cols] tensor starting at column 1 (a misaligned column view).
  Tensor NewTensor(DType dtype, std::initializer_list<int64_t> shape);
  Tensor F32(const std::vector<float>& v, std::initializer_list<int64_t> shape);
  Tensor F32View(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t pad_cols, Tensor* parent);
  Tensor I32(const std::vector<int32_t>& v);
  // Waits for every op (throws if one failed) and reads a contiguous tensor back.
  std::vector<float> ReadF32(const Tensor& t);
  std::vector<int32_t> ReadI32(const Tensor& t);
  std::vector<uint8_t> ReadBytes(const Tensor& t);
  // Column block [c0, c0 + n) of every row of a read-back matrix with `ld` columns.
  static std::vector<float> ColumnBlock(const std::vector<float>& m, int64_t ld, int64_t c0, int64_t n);

  // A norm weight or bias vector [n] (F32 or BF16, imported as the loader imports vectors).
  Weight Vector(const std::vector<float>& v, bool bf16);
  // A matrix prepared by the backend; false (and a recorded skip note) when the backend
  // refuses the format with UNSUPPORTED.
  bool Prepare(const HostMatrix& m, Weight* w);
  // The registered KV codecs this backend runs (SupportsKvCodec); each refused one is recorded
  // as a test property, as refused weight formats are.
  std::vector<const KvCodec*> KvCodecs();
  AttentionBatch UploadBatch(const HostBatch& b, Tensor* positions = nullptr) {
    return conformance::UploadBatch(be(), b, positions);
  }

  std::unique_ptr<Backend> be_;
};

// Element-wise comparisons naming the first mismatch (index, got, want, tolerance).
::testing::AssertionResult AllNear(const std::vector<float>& got, const std::vector<double>& want,
                                   const std::vector<double>& tol);
::testing::AssertionResult AllBitEqual(const std::vector<float>& got, const std::vector<float>& want);
template <typename T>
::testing::AssertionResult AllEqual(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << +got[i] << ", want " << +want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

std::string BackendParamName(const ::testing::TestParamInfo<BackendKind>& info);

}  // namespace llmrt::conformance

namespace llmrt {
// gtest prints test parameters through PrintTo found by argument-dependent lookup.
inline void PrintTo(BackendKind kind, std::ostream* os) { *os << BackendKindName(kind); }
}  // namespace llmrt

// Instantiates a BackendTest-derived fixture for every backend kind (see the top comment).
#define LLMRT_BACKEND_SUITE(Fixture)                                                                \
  INSTANTIATE_TEST_SUITE_P(, Fixture,                                                               \
                           ::testing::Values(::llmrt::BackendKind::kCpu, ::llmrt::BackendKind::kCuda), \
                           ::llmrt::conformance::BackendParamName)

#endif  // LLMRT_TESTS_BACKEND_HARNESS_H_
