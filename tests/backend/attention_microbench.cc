// Decode attention on the CPU backend alone, over a paged KV cache laid out as the runtime lays
// it out (pages [num_pages, layers, page_size, row_bytes], each session's pages scattered over
// the pool in a shuffled order). A program that prints a table, not a test.
//
//   llmrt_attention_microbench [--contexts 4096,32768] [--sessions 1,8] [--layers 4]
//                              [--threads 2] [--reps 5] [--codec bf16|fp8] [--page 16] [--only mla|gqa]
//
// Rows: Kimi K2's MLA (64 heads, latent 512 + rope 64, absorbed: every head scores against the
// shared latent row and sums its first 512 values) and GLM-4.5's GQA (96 query heads over 8 KV
// heads of 128), one decoding token per session, each over `context` cached positions. The table
// gives the best time, the attention's floating-point rate (2 flops per multiply-add of the
// scores and of the weighted values) and the cache bytes read per second (each row once). MLA
// does 121 flops per byte of a BF16 row, so it is bound by arithmetic; GQA does 12 and leans
// on the memory system.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "src/backend/registry.h"
#include "src/kv/kv_store.h"
#include "src/util/bf16.h"
#include "tests/backend/microbench_util.h"

namespace llmrt {
namespace {

using microbench::Must;
using microbench::MustOk;

// A tensor of normal values (F32).
Tensor RandomF32(Backend& be, int64_t rows, int64_t cols, std::mt19937& rng) {
  Tensor t = Must(be.Allocate(DType::kF32, {rows, cols}), "Allocate");
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (float& x : v) x = nd(rng);
  MustOk(be.Upload(v.data(), v.size() * 4, t), "Upload");
  return t;
}

// Fills every cached row with valid values of the codec: BF16 values of about unit size, FP8
// codes that are finite (e4m3's 0x7f / 0xff are NaN).
void FillPages(KvStore& store, uint32_t codec) {
  uint8_t* p = store.view().pages.data_as<uint8_t>();
  const size_t n = static_cast<size_t>(store.view().pages.numel());
  uint32_t x = 12345;
  if (codec == kKvCodecBf16) {
    uint16_t* h = reinterpret_cast<uint16_t*>(p);
    for (size_t i = 0; i < n / 2; ++i) {
      x = x * 1664525u + 1013904223u;
      h[i] = F32ToBf16(static_cast<float>(static_cast<int32_t>(x >> 8) - (1 << 23)) / (1 << 23));
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      p[i] = static_cast<uint8_t>(x >> 24) & 0xbf;  // bit 6 clear: never 0x7f / 0xff
    }
  }
}

struct Setup {
  std::unique_ptr<Backend> be;
  std::unique_ptr<KvStore> store;
  Tensor meta;
  AttentionBatch batch;
};

Setup Make(int threads, const KvShape& shape, uint32_t codec, int64_t page, int64_t sessions, int64_t context) {
  Setup s;
  BackendOptions bo;
  bo.num_threads = threads;
  s.be = Must(CreateBackend(BackendKind::kCpu, bo), "the CPU backend");
  const int64_t per_seq = (context + page - 1) / page;
  KvStoreOptions o;
  o.codec = FindKvCodec(codec);
  o.shape = shape;
  o.page_size = page;
  o.num_pages = per_seq * sessions;
  s.store = Must(KvStore::Create(*s.be, o), "KvStore");
  FillPages(*s.store, codec);
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    if (codec != kKvCodecBf16) MustOk(s.store->SetScale(l, 0.05f), "SetScale");
  }
  // The pool's pages dealt to the sessions in a shuffled order, as a serving runtime's
  // allocator ends up handing them out.
  std::vector<int32_t> order(static_cast<size_t>(o.num_pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  // token_seq [S], token_ctx [S], seq_page_start [S + 1], page_ids, slot [S], first [S]
  std::vector<int32_t> meta;
  for (int64_t q = 0; q < sessions; ++q) meta.push_back(static_cast<int32_t>(q));
  for (int64_t q = 0; q < sessions; ++q) meta.push_back(static_cast<int32_t>(context));
  for (int64_t q = 0; q <= sessions; ++q) meta.push_back(static_cast<int32_t>(q * per_seq));
  meta.insert(meta.end(), order.begin(), order.end());
  for (int64_t q = 0; q < sessions; ++q) {
    meta.push_back(static_cast<int32_t>(order[static_cast<size_t>(q * per_seq + (context - 1) / page)] * page +
                                        (context - 1) % page));
  }
  for (int64_t q = 0; q < sessions; ++q) meta.push_back(static_cast<int32_t>(q));
  s.meta = Must(s.be->Allocate(DType::kI32, {static_cast<int64_t>(meta.size())}), "Allocate");
  MustOk(s.be->Upload(meta.data(), meta.size() * 4, s.meta), "Upload");
  const int64_t P = o.num_pages, S = sessions;
  s.batch.token_seq = s.meta.Rows(0, S);
  s.batch.token_ctx = s.meta.Rows(S, 2 * S);
  s.batch.seq_page_start = s.meta.Rows(2 * S, 3 * S + 1);
  s.batch.page_ids = s.meta.Rows(3 * S + 1, 3 * S + 1 + P);
  s.batch.slot_mapping = s.meta.Rows(3 * S + 1 + P, 4 * S + 1 + P);
  s.batch.seq_first_token = s.meta.Rows(4 * S + 1 + P, 5 * S + 1 + P);
  s.batch.num_tokens = S;
  s.batch.num_seqs = S;
  s.batch.max_ctx = context;
  return s;
}

int Main(int argc, char** argv) {
  std::vector<int64_t> contexts = {4096, 32768}, sessions_list = {1, 8};
  int64_t layers = 4, page = 16;
  int threads = 2, reps = 5;
  std::string codec_name = "bf16", only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--contexts") contexts = microbench::ParseList(v);
    else if (a == "--sessions") sessions_list = microbench::ParseList(v);
    else if (a == "--layers") layers = std::atoll(v);
    else if (a == "--page") page = std::atoll(v);
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--reps") reps = std::atoi(v);
    else if (a == "--codec") codec_name = v;
    else if (a == "--only") only = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (codec_name != "bf16" && codec_name != "fp8") {
    std::fprintf(stderr, "--codec is bf16 or fp8\n");
    return 2;
  }
  if (layers < 1 || page < 1 || threads < 1 || reps < 1) {
    std::fprintf(stderr, "--layers, --page, --threads and --reps must be positive\n");
    return 2;
  }
  const uint32_t codec = codec_name == "bf16" ? kKvCodecBf16 : kKvCodecFp8;
  std::printf("decode attention, %s KV, %lld layers in the cache (the middle one read), pages of %lld tokens dealt "
              "in a shuffled order, %d thread(s), best of %d\n\n",
              codec_name.c_str(), static_cast<long long>(layers), static_cast<long long>(page), threads, reps);
  std::printf("| attention | sessions | context | KV MB read | ms | GFLOP/s | KV GB/s |\n"
              "|---|---:|---:|---:|---:|---:|---:|\n");
  MlaDims mla;
  mla.heads = 64;
  mla.nope = 128;
  mla.rope = 64;
  mla.v = 128;
  mla.kv_lora = 512;
  const int64_t gqa_heads = 96, gqa_kv = 8, gqa_dim = 128;
  for (const bool is_mla : {true, false}) {
    if ((only == "mla" && !is_mla) || (only == "gqa" && is_mla)) continue;
    KvShape shape;
    shape.num_layers = layers;
    if (is_mla) {
      shape.parts = {{mla.kv_lora, 128, false}, {mla.rope, 128, true}};
    } else {
      shape.parts = {{gqa_kv * gqa_dim, gqa_dim, false}, {gqa_kv * gqa_dim, gqa_dim, false}};
    }
    for (int64_t S : sessions_list) {
      for (int64_t C : contexts) {
        Setup run = Make(threads, shape, codec, page, S, C);
        Backend& be = *run.be;
        std::mt19937 rng(11);
        std::vector<Tensor> in;
        Tensor out;
        if (is_mla) {
          in.push_back(RandomF32(be, S, mla.heads * mla.kv_lora, rng));
          in.push_back(RandomF32(be, S, mla.heads * (mla.nope + mla.rope), rng));
          out = Must(be.Allocate(DType::kF32, {S, mla.heads * mla.kv_lora}), "Allocate");
        } else {
          in.push_back(RandomF32(be, S, gqa_heads * gqa_dim, rng));
          out = Must(be.Allocate(DType::kF32, {S, gqa_heads * gqa_dim}), "Allocate");
        }
        const KvCacheView& view = run.store->view();
        const double t = microbench::Best(reps, [&] {
          if (is_mla) {
            be.MlaAttention(in[0], in[1], view, layers / 2, run.batch, mla, 0.07f, nullptr, out);
          } else {
            be.GqaAttention(in[0], view, layers / 2, run.batch, gqa_heads, gqa_kv, gqa_dim, 0.088f, out);
          }
          MustOk(be.Synchronize(), "attention");
        });
        const double bytes = static_cast<double>(S * C * view.row_bytes);
        const double flops = is_mla ? 2.0 * S * C * mla.heads * (mla.kv_lora + mla.rope + mla.kv_lora)
                                    : 2.0 * S * C * gqa_heads * 2 * gqa_dim;
        std::printf("| %s | %lld | %lld | %.1f | %.3f | %.1f | %.1f |\n", is_mla ? "MLA, Kimi K2" : "GQA, GLM-4.5",
                    static_cast<long long>(S), static_cast<long long>(C), bytes / 1e6, t * 1e3, flops / t / 1e9,
                    bytes / t / 1e9);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace llmrt

int main(int argc, char** argv) { return llmrt::Main(argc, argv); }
