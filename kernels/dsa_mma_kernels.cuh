// The DSA indexer's scores on the tensor cores (DsaScores::kTensorCores): its body, in a header of
// its own so that it compiles twice, for the device (kernels/attention.cu, with kernels/mma.cuh)
// and on the host in tests/cuda_emulation/ (the MMA and ldmatrix computed from the PTX ISA's
// fragment tables). The includer declares, in namespace llmrt::cuda::dsa:
//   void Mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
//       mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 accumulating into d;
//   void LdMatrix4(const uint16_t* row, uint32_t (&r)[4])  ldmatrix .x4, not transposed.
//
// I(t, p) = sum_h w[t,h] * relu(q[t,h] . k_p * key_scale) as a matrix product: the token's heads
// (rows) by the block's positions (columns) over the head dimension. The float32 kernels
// (kv_kernels.cuh) run it on the CUDA cores, one fmaf per multiply-add; GLM-5's 32 heads of 128
// over a 4,096-token prompt are 69 GFLOP a layer, and a decode step's long contexts make them
// compute-bound too. Here the bf16 MMAs take them, with float32's accuracy kept:
//   - the query is split into three bfloat16 parts, q = q0 + q1 + q2 (q0 = bf16(q), q1 =
//     bf16(q - q0), q2 = bf16(q - q0 - q1)): with the key's values exact in bfloat16, every
//     product is exact in float32, and the parts carry the query's 24 bits;
//   - the key's values are staged as bfloat16: BF16 values as stored, FP8 codes (exact in
//     bfloat16) without their scale. The key's columns fall into groups of one scale each (the
//     whole key for flat rows: 1 for BF16, the layer's scale for FP8; each tile of a tiled FP8
//     segment; 1 for the phase policy's fresh rows), each a whole number of 16-column steps; the
//     MMAs sum a group into accumulators of its own, folded in as acc = fma(sum, scale, acc);
//   - then, per head, dot = acc * key_scale, and where dot > 0, s += w * dot (product and sum
//     each rounded), a thread's heads in order, then the sums of the 8 lanes that share the
//     columns by a butterfly (xor 4, 8, 16).
// The float32 operations differ from the CUDA-core kernels' (the MMAs' additions, a group's scale
// applied to its sum rather than to each value, the sum over heads by a tree): the scores agree
// with theirs within float32's bound, not bit for bit, and selections where the scores decide.
//
// One block of 4 warps per (token, kMmaPositions positions); warp w takes positions 32 w .. 32 w +
// 31 (four n8 tiles) for all heads (kMTiles m16 tiles). Shared memory (DsaMmaBytes): the query's
// parts [3][16 kMTiles][kp + 8] and the key rows [kMmaPositions][kp + 8] as bfloat16 (kp: the
// head dimension rounded up to 16; the 8 codes of padding put ldmatrix's rows on distinct banks),
// the heads' weights, and each position's row and group scales.
#ifndef LLMRT_KERNELS_DSA_MMA_KERNELS_CUH_
#define LLMRT_KERNELS_DSA_MMA_KERNELS_CUH_

#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/kv_access.cuh"

namespace llmrt::cuda::dsa {

constexpr int kMmaThreads = 128, kMmaWarps = 4;
constexpr int kMmaPositions = 128;  // a block's positions: 32 a warp
constexpr int kMaxKeyGroups = 8;
constexpr int64_t kMaxMmaHeadDim = 256;

// The key's columns [0, head_dim) in groups of one scale each, read from a cache row (fresh rows:
// BF16 values at (key_offset + column) * 2, scale 1).
struct KeyGroups {
  int32_t count = 0;
  int32_t end[kMaxKeyGroups] = {};       // group g: columns [g ? end[g - 1] : 0, end[g])
  int32_t bf16[kMaxKeyGroups] = {};      // BF16 values (else FP8 codes)
  int64_t offset[kMaxKeyGroups] = {};    // byte offset in the row of the group's first column
  int32_t scale[kMaxKeyGroups] = {};     // -2: 1; -1: the layer's scale; else the row's scale index
};

// The groups of a key at key_offset of head_dim columns in rows of layout r (flat rows of type
// r.type, or segments), or false where the tensor-core kernel does not take them: F32 values, a
// group boundary not on a 16-column step, more than kMaxKeyGroups groups, columns outside the
// row's segments.
__host__ __device__ inline bool MakeKeyGroups(const KvRowRef& r, int64_t key_offset, int64_t head_dim, KeyGroups* g) {
  *g = KeyGroups{};
  if (head_dim < 1 || head_dim > kMaxMmaHeadDim || key_offset < 0) return false;
  if (r.nseg == 0) {
    if (r.type != kElemBf16 && r.type != kElemFp8E4M3) return false;
    const bool bf16 = r.type == kElemBf16;
    g->count = 1;
    g->end[0] = static_cast<int32_t>(head_dim);
    g->bf16[0] = bf16 ? 1 : 0;
    g->offset[0] = key_offset * (bf16 ? 2 : 1);
    g->scale[0] = bf16 ? -2 : -1;
    return true;
  }
  for (int64_t c = 0; c < head_dim;) {
    const int64_t col = key_offset + c;
    const KvSegRef* s = nullptr;
    for (int k = 0; k < r.nseg; ++k) {
      if (col >= r.seg[k].start && col < r.seg[k].start + r.seg[k].count) s = &r.seg[k];
    }
    if (s == nullptr || g->count == kMaxKeyGroups) return false;
    const int64_t j = col - s->start;  // the column's place in its segment
    int64_t end = s->start + s->count - key_offset;  // the segment's end, in key columns
    if (!s->bf16) {
      if (s->tile <= 0) return false;
      const int64_t tile_end = s->start + (j / s->tile + 1) * s->tile - key_offset;
      end = end < tile_end ? end : tile_end;
    }
    end = end < head_dim ? end : head_dim;
    if (end < head_dim && end % 16 != 0) return false;  // a boundary inside a 16-column step
    const int n = g->count++;
    g->end[n] = static_cast<int32_t>(end);
    g->bf16[n] = s->bf16 ? 1 : 0;
    g->offset[n] = s->byte_offset + (s->bf16 ? 2 * j : j);
    g->scale[n] = s->bf16 ? -2 : static_cast<int32_t>(s->first_scale + j / s->tile);
    c = end;
  }
  return true;
}

// v as three bfloat16 parts whose sum is v: exactly for |v| >= 2^-110 (below, within 2^-134),
// the top part v rounded to bfloat16, each next part the rest rounded. A finite v that would
// round past bfloat16's largest value takes that value as its top part (the rest is exact); an
// infinity or NaN is the top part alone.
__host__ __device__ inline void SplitBf16x3(float v, uint16_t* p0, uint16_t* p1, uint16_t* p2) {
  constexpr uint16_t kLargest = 0x7f7f;  // bfloat16's largest finite value, 0x1.fep127
  *p0 = F32ToBf16(v);
  *p1 = *p2 = 0;
  if (!(v - v == 0.0f)) return;  // an infinity or NaN: the top part alone
  if ((*p0 & 0x7f80u) == 0x7f80u) *p0 = static_cast<uint16_t>(kLargest | (*p0 & 0x8000u));  // past the largest
  const float r1 = v - Bf16ToF32(*p0);
  *p1 = F32ToBf16(r1);
  *p2 = F32ToBf16(r1 - Bf16ToF32(*p1));
}

__host__ __device__ constexpr int64_t DsaMmaKp(int64_t head_dim) { return (head_dim + 15) / 16 * 16; }
__host__ __device__ constexpr int64_t DsaMmaStride(int64_t head_dim) { return DsaMmaKp(head_dim) + 8; }
// Dynamic shared memory of the instance with m_tiles m16 tiles of heads.
__host__ __device__ constexpr int64_t DsaMmaBytes(int m_tiles, int64_t head_dim) {
  return (3 * 16 * m_tiles + kMmaPositions) * DsaMmaStride(head_dim) * 2 +  // query parts, key rows
         16 * m_tiles * 4 +                                                   // weights
         kMmaPositions * kMaxKeyGroups * 4 +                                  // group scales
         kMmaPositions * static_cast<int64_t>(sizeof(void*) + sizeof(int));   // rows, fresh flags
}
// Tiles of kMmaPositions positions a block takes, in turn: as many as leave the pass enough blocks
// for several waves of the device's multiprocessors, up to 8. A block splits the token's query
// once for its tiles, which at 32 to 64 heads is as much work as a few tiles' MMAs.
__host__ __device__ constexpr int DsaMmaTilesPerBlock(int64_t tokens, int64_t max_ctx, int64_t sm_count) {
  const int64_t blocks = tokens * ((max_ctx + kMmaPositions - 1) / kMmaPositions);
  const int64_t per = blocks / (8 * (sm_count > 0 ? sm_count : 1));
  return per < 1 ? 1 : per > 8 ? 8 : static_cast<int>(per);
}
// The m16 tiles that take `heads` (1, 2 or 4), or 0 past 64 heads.
__host__ __device__ constexpr int DsaMmaTiles(int64_t heads) {
  return heads < 1 ? 0 : heads <= 16 ? 1 : heads <= 32 ? 2 : heads <= 64 ? 4 : 0;
}

// As DsaScoreKernel's contract (kv_kernels.cuh): scores[t * max_ctx + p] for the positions of
// tokens whose context exceeds top_k; a position whose page is out of range scores 0 and raises
// kErrPage. heads <= 16 kMTiles, head_dim <= kMaxMmaHeadDim, groups from MakeKeyGroups. Block
// (t, y) scores tiles_per_block tiles of kMmaPositions positions from y * tiles_per_block tiles.
template <int kMTiles>
__global__ void __launch_bounds__(kMmaThreads) DsaScoreMmaKernel(ConstMat q, ConstMat w, KvRef kv, int64_t layer,
                                                                 BatchRef b, int64_t heads, int64_t head_dim,
                                                                 int64_t key_offset, float key_scale, int64_t top_k,
                                                                 KeyGroups groups, int tiles_per_block, float* scores,
                                                                 int32_t* err) {
  constexpr int kM = 16 * kMTiles;
  const int64_t t = blockIdx.x, first = blockIdx.y * static_cast<int64_t>(tiles_per_block) * kMmaPositions;
  const int64_t ctx = b.token_ctx[t];
  if (ctx <= top_k || first >= ctx || first >= b.max_ctx) return;  // uniform over the block
  // The block's positions end here (a context past the scores' bound is scored up to the bound:
  // the top-k reports it).
  const int64_t end = ctx < b.max_ctx ? ctx : b.max_ctx;
  const int kp = static_cast<int>(DsaMmaKp(head_dim)), stride = kp + 8;
  uint16_t* const qs = DynamicShared<uint16_t>();           // [3][kM][stride]
  uint16_t* const ks = qs + 3 * kM * stride;               // [kMmaPositions][stride]
  float* const ws = reinterpret_cast<float*>(ks + kMmaPositions * stride);  // [kM]
  float* const sc = ws + kM;                                // [kMaxKeyGroups][kMmaPositions]
  const uint8_t** rows = reinterpret_cast<const uint8_t**>(sc + kMaxKeyGroups * kMmaPositions);
  int* const fresh = reinterpret_cast<int*>(rows + kMmaPositions);
  const int x = static_cast<int>(threadIdx.x), lane = x & 31, warp = x >> 5;

  // The query's three parts and the weights (zeros past the heads and the head dimension), once
  // for the block's tiles: kMmaThreads / kp heads' columns over the threads at a time (one
  // division a thread), or a head's over them for kp past kMmaThreads.
  const float* qt = q.data + t * q.ld;
  const auto split = [&](int h, int c) {
    const float v = h < heads && c < head_dim ? qt[h * head_dim + c] : 0.0f;
    uint16_t p0b, p1b, p2b;
    SplitBf16x3(v, &p0b, &p1b, &p2b);
    qs[(0 * kM + h) * stride + c] = p0b;
    qs[(1 * kM + h) * stride + c] = p1b;
    qs[(2 * kM + h) * stride + c] = p2b;
  };
  if (kp <= kMmaThreads) {
    const int per = kMmaThreads / kp, xh = x / kp, xc = x - xh * kp;
    if (xh < per) {
      for (int h = xh; h < kM; h += per) split(h, xc);
    }
  } else {
    for (int h = 0; h < kM; ++h) {
      for (int c = x; c < kp; c += kMmaThreads) split(h, c);
    }
  }
  for (int h = x; h < kM; h += kMmaThreads) ws[h] = h < heads ? w.data[t * w.ld + h] : 0.0f;
  const Context cx = ContextOf(kv, b, t);
  const float layer_scale = LayerScale(kv, layer);
  for (int tile = 0; tile < tiles_per_block; ++tile) {
    const int64_t p0 = first + static_cast<int64_t>(tile) * kMmaPositions;
    if (p0 >= end) break;  // uniform over the block
    const int64_t n = end - p0 < kMmaPositions ? end - p0 : kMmaPositions;  // this tile's positions
    if (tile > 0) __syncthreads();  // the tile before is read
    // Each thread finds one position's row and its groups' scales.
    {
      RowPtr row{nullptr, false};
      if (x < n && !Locate(kv, layer, cx, p0 + x, &row)) {
        RaiseError(err, kErrPage);
        row = RowPtr{nullptr, false};
      }
      rows[x] = row.data;
      fresh[x] = row.fresh ? 1 : 0;
      for (int gi = 0; gi < groups.count; ++gi) {
        float s = 1.0f;
        if (row.data != nullptr && !row.fresh && groups.scale[gi] >= -1) {
          s = groups.scale[gi] == -1 ? layer_scale
                                     : reinterpret_cast<const float*>(row.data + kv.row.scale_offset)[groups.scale[gi]];
        }
        sc[gi * kMmaPositions + x] = s;
      }
    }
    __syncthreads();  // the rows are found
    // The key rows as bfloat16, a row over a warp's lanes (two columns a lane a load, the column's
    // group found once), kStageBatch rows a warp at a time so that their loads are in flight
    // together: the values of BF16 groups and fresh rows as stored, FP8 codes exactly; zeros for
    // missing rows and past the head dimension. (Group boundaries are even: a lane's two columns
    // share a group.)
    constexpr int kStageBatch = 8;
    for (int c = 2 * lane; c < kp; c += 64) {
      int gi = 0;
      while (gi + 1 < groups.count && groups.end[gi] <= c) ++gi;
      const int64_t at = groups.offset[gi] + (c - (gi > 0 ? groups.end[gi - 1] : 0)) * (groups.bf16[gi] ? 2 : 1);
      const bool bf16 = groups.bf16[gi] != 0, in = c < head_dim, second = c + 1 < head_dim;
      for (int r0 = warp; r0 < kMmaPositions; r0 += kMmaWarps * kStageBatch) {
        uint32_t v[kStageBatch];
        bool codes[kStageBatch];
#pragma unroll
        for (int u = 0; u < kStageBatch; ++u) {
          const int r = r0 + u * kMmaWarps;
          const uint8_t* row = rows[r];
          const bool fr = fresh[r] != 0;
          v[u] = 0;
          codes[u] = false;
          if (row == nullptr || !in) continue;
          if (fr || bf16) {
            const uint16_t* e = fr ? reinterpret_cast<const uint16_t*>(row) + key_offset + c
                                   : reinterpret_cast<const uint16_t*>(row + at);
            v[u] = e[0] | (second ? static_cast<uint32_t>(e[1]) << 16 : 0u);
          } else {
            v[u] = row[at] | (second ? static_cast<uint32_t>(row[at + 1]) << 8 : 0u);
            codes[u] = true;
          }
        }
#pragma unroll
        for (int u = 0; u < kStageBatch; ++u) {
          *reinterpret_cast<uint32_t*>(ks + (r0 + u * kMmaWarps) * stride + c) = codes[u] ? Fp8PairToBf16(v[u]) : v[u];
        }
      }
    }
    __syncthreads();

    // The warp's positions: columns 32 warp .. (four n8 tiles) of the block's.
    const int g = lane >> 2, c4 = lane & 3;
    const int a_row = lane & 15, a_col = 8 * (lane >> 4);
    const int b_row = (lane & 7) + 8 * (lane >> 4), b_col = 8 * ((lane >> 3) & 1);
    const int n0 = 32 * warp;
    float acc[kMTiles][4][4], part[kMTiles][4][4];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
      }
    }
    for (int gi = 0, k0 = 0; gi < groups.count; ++gi) {
      const int k1 = static_cast<int>(DsaMmaKp(groups.end[gi]));  // (only the last can be partial)
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
          for (int e = 0; e < 4; ++e) part[mi][ni][e] = 0.0f;
        }
      }
      for (; k0 < k1; k0 += 16) {
        uint32_t bf[4][2];
#pragma unroll
        for (int ni = 0; ni < 4; ni += 2) {
          uint32_t r[4];
          LdMatrix4(ks + (n0 + ni * 8 + b_row) * stride + k0 + b_col, r);
          bf[ni][0] = r[0];
          bf[ni][1] = r[1];
          bf[ni + 1][0] = r[2];
          bf[ni + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
          for (int pi = 0; pi < 3; ++pi) {
            uint32_t a[4];
            LdMatrix4(qs + (pi * kM + mi * 16 + a_row) * stride + k0 + a_col, a);
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) Mma16816(part[mi][ni], a, bf[ni][0], bf[ni][1]);
          }
        }
      }
      // Fold the group's sums with each position's scale (column 8 ni + 2 c4 + (e % 2)).
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float s = sc[gi * kMmaPositions + n0 + 8 * ni + 2 * c4 + (e & 1)];
#pragma unroll
          for (int mi = 0; mi < kMTiles; ++mi) acc[mi][ni][e] = fmaf(part[mi][ni][e], s, acc[mi][ni][e]);
        }
      }
    }

    // Per position: the thread's heads 16 mi + g (e < 2) and + 8 (e >= 2) in order, then the 8
    // lanes of the same c4 by a butterfly (every lane ends with the same sum).
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int q2 = 0; q2 < 2; ++q2) {
        float s = 0.0f;
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
          for (int hi = 0; hi < 2; ++hi) {
            const float dot = acc[mi][ni][2 * hi + q2] * key_scale;
            if (dot > 0.0f) s = __fadd_rn(s, __fmul_rn(ws[16 * mi + g + 8 * hi], dot));
          }
        }
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 4));
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 8));
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 16));
        const int pos = n0 + 8 * ni + 2 * c4 + q2;
        if (g == 0 && pos < n) scores[t * b.max_ctx + p0 + pos] = s == 0.0f ? 0.0f : s;  // -0 is +0
      }
    }
  }
}

}  // namespace llmrt::cuda::dsa

#endif  // LLMRT_KERNELS_DSA_MMA_KERNELS_CUH_
