// llm-convert: writes a checkpoint's linear weights as FP8 e4m3 with block scales or as INT4
// compressed-tensors pack-quantized, in the formats llmrt and the Hugging Face ecosystem load.
//
//   llm-convert --in DIR --out DIR --to fp8 [--block 128]
//   llm-convert --in DIR --out DIR --to int4 [--group 32|128] [--all-linears] [--shard-gib N]
//
// fp8: every decoder-layer linear but the MoE router (and GLM-5's indexer weights_proj), as the
// DeepSeek / Kimi / GLM FP8 releases. int4: the routed experts (Kimi K2-Thinking's layout), or
// with --all-linears every decoder linear but kv_b_proj, the router and the DSA indexer. The
// source may be BF16, F32 or FP8 block-scaled; weights not quantized are written as BF16.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "llmrt/llmrt.h"

int main(int argc, char** argv) {
  std::string in, out, to;
  llm_convert_options o;
  llm_convert_options_init(&o);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--all-linears") {
      o.int4_all_linears = 1;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "llm-convert: %s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--in") {
      in = v;
    } else if (a == "--out") {
      out = v;
    } else if (a == "--to") {
      to = v;
    } else if (a == "--block") {
      o.fp8_block = static_cast<uint32_t>(std::atoll(v));
    } else if (a == "--group") {
      o.int4_group = static_cast<uint32_t>(std::atoll(v));
    } else if (a == "--shard-gib") {
      o.max_shard_bytes = static_cast<uint64_t>(std::atof(v) * (1ull << 30));
    } else {
      std::fprintf(stderr, "llm-convert: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (in.empty() || out.empty() || (to != "fp8" && to != "int4")) {
    std::fprintf(stderr,
                 "usage: llm-convert --in DIR --out DIR --to fp8 [--block 128]\n"
                 "       llm-convert --in DIR --out DIR --to int4 [--group 32|128] [--all-linears] [--shard-gib N]\n");
    return 2;
  }
  o.target = to == "fp8" ? LLM_CONVERT_FP8_BLOCK : LLM_CONVERT_INT4;
  char summary[512];
  if (llm_convert_checkpoint(in.c_str(), out.c_str(), &o, summary, sizeof(summary), nullptr) != LLM_OK) {
    std::fprintf(stderr, "llm-convert: %s\n", llm_last_error());
    return 1;
  }
  std::printf("llm-convert: %s -> %s: %s\n", in.c_str(), out.c_str(), summary);
  return 0;
}
