// Backend::MakeSyntheticWeight: a backend that generates synthetic weights on its device holds
// exactly what PrepareWeight makes of the host-made part (src/quant/synthetic_weights.h), for
// BF16, FP8 block-scaled and INT4 group-scaled matrices, whole and as tensor-parallel slices:
// the same tensors (dtype, shape, bytes) and the same MatMul output, bit for bit. A backend that
// does not generate (the CPU) answers nullopt, and the loader makes the part on the host.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "tests/backend/harness.h"
#include "src/quant/synthetic_weights.h"

namespace llmrt::conformance {
namespace {

class SyntheticWeight : public BackendTest {};

struct SyntheticCase {
  WeightFormatId format;
  WeightParams params;
  int64_t rows, cols;
  std::vector<std::vector<int64_t>> parts;  // {row0, rows, col0, cols}
};

std::vector<SyntheticCase> Cases() {
  WeightParams fp8, int4_32, int4_128;
  fp8.block_rows = 128;
  fp8.block_cols = 128;
  int4_32.group = 32;
  int4_128.group = 128;
  // Partial last blocks (FP8: 300 = 2 * 128 + 44 rows, 400 = 3 * 128 + 16 columns), row and
  // column slices as ranks cut them, and an odd-sized BF16 part.
  return {
      {kWeightBf16, {}, 301, 97, {{0, 301, 0, 97}, {100, 101, 0, 97}, {0, 301, 32, 33}, {7, 5, 90, 7}}},
      {kWeightFp8Block, fp8, 300, 400, {{0, 300, 0, 400}, {128, 128, 0, 400}, {256, 44, 0, 400}, {0, 300, 384, 16},
                                        {128, 172, 128, 256}}},
      {kWeightInt4Group, int4_32, 96, 256, {{0, 96, 0, 256}, {17, 40, 0, 256}, {0, 96, 64, 128}}},
      {kWeightInt4Group, int4_128, 64, 512, {{0, 64, 0, 512}, {0, 64, 256, 256}}},
  };
}

std::vector<uint8_t> Read(Backend& be, const Tensor& t) {
  std::vector<uint8_t> out(t.bytes());
  MustOk(be.Download(t, out.data(), out.size()), "Download");
  return out;
}

TEST_P(SyntheticWeight, DeviceMadeEqualsHostMadeAndPrepared) {
  std::mt19937 rng(11);
  for (const SyntheticCase& c : Cases()) {
    for (const std::vector<int64_t>& p : c.parts) {
      SyntheticMatrixSpec spec;
      spec.name = "model.layers.3.mlp.experts.5.up_proj.weight";
      spec.stream = SyntheticStream(42, spec.name);
      spec.format = c.format;
      spec.params = c.params;
      spec.rows = c.rows;
      spec.cols = c.cols;
      spec.row0 = p[0];
      spec.part_rows = p[1];
      spec.col0 = p[2];
      spec.part_cols = p[3];
      SCOPED_TRACE(::testing::Message() << WeightFormatOf(c.format).name << " group " << c.params.group << " ["
                                        << c.rows << ", " << c.cols << "] rows [" << p[0] << ", +" << p[1]
                                        << ") cols [" << p[2] << ", +" << p[3] << ")");
      const std::optional<Weight> made = Must(be().MakeSyntheticWeight(spec), "MakeSyntheticWeight");
      if (GetParam() == BackendKind::kCpu) {
        // The CPU backend prepares host-made parts (PrepareWeight wraps them without a copy).
        EXPECT_FALSE(made.has_value());
        continue;
      }
      ASSERT_TRUE(made.has_value()) << "the device backend did not generate";
      const StoredMatrix host = Must(MakeSyntheticPart(spec), "MakeSyntheticPart");
      const Weight want = Must(be().PrepareWeight(host), "PrepareWeight");
      EXPECT_EQ(made->format, want.format);
      EXPECT_EQ(made->quantized, want.quantized);
      EXPECT_EQ(made->rows, want.rows);
      EXPECT_EQ(made->cols, want.cols);
      EXPECT_EQ(made->params.group, want.params.group);
      EXPECT_EQ(made->params.block_rows, want.params.block_rows);
      EXPECT_EQ(made->params.block_cols, want.params.block_cols);
      for (const auto& [got_t, want_t, what] : {std::tuple{&made->data, &want.data, "codes"},
                                                std::tuple{&made->scales, &want.scales, "scales"}}) {
        SCOPED_TRACE(what);
        ASSERT_EQ(got_t->data() == nullptr, want_t->data() == nullptr);
        if (want_t->data() == nullptr) continue;
        EXPECT_EQ(got_t->dtype(), want_t->dtype());
        EXPECT_EQ(got_t->ShapeString(), want_t->ShapeString());
        EXPECT_TRUE(AllEqual(Read(be(), *got_t), Read(be(), *want_t)));
      }
      // And as the kernels see them: the same products.
      const int64_t T = 3;
      const Tensor x = F32(RandomNormal(static_cast<size_t>(T * spec.part_cols), rng), {T, spec.part_cols});
      const Tensor got_out = NewTensor(DType::kF32, {T, spec.part_rows});
      const Tensor want_out = NewTensor(DType::kF32, {T, spec.part_rows});
      be().MatMul(x, *made, got_out);
      be().MatMul(x, want, want_out);
      EXPECT_TRUE(AllBitEqual(ReadF32(got_out), ReadF32(want_out)));
    }
  }
}

LLMRT_BACKEND_SUITE(SyntheticWeight);

}  // namespace
}  // namespace llmrt::conformance
