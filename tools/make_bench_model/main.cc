// llm-make-bench-model: writes the generated checkpoints llm-bench measures (Kimi K2, GLM-5 and
// GLM-4.5 layer structures with random weights, in every weight format llm-bench compares) and
// describes them. llm-bench runs it for each checkpoint it needs; it links engine internals
// (`WriteSafetensors`) so that llm-bench can stay a client of the public header alone.
//
//   llm-make-bench-model --dir DIR [--preset P] [--weights W] [--layers N] [--hidden N]
//                        [--tokenizer DIR]                      write DIR unless it is current
//   llm-make-bench-model --describe [--preset P] [--weights W] [--layers N] [--hidden N]
//   llm-make-bench-model --describe-dir DIR                     any checkpoint directory
//   llm-make-bench-model --config-only DIR [--preset P] [--weights W] [--layers N] [--hidden N]
//                        [--experts N]                          config.json alone (synthetic runs)
//
// Presets: "k2" (default: the 2.4 GB BF16 DeepseekV3ForCausalLM model of llm-bench's decode,
// --integrity and --formats modes), "glm45" (Glm4MoeForCausalLM: GQA) and "glm5"
// (GlmMoeDsaForCausalLM: MLA + DSA indexer) of the same size, whose layers and hidden width
// --layers / --hidden change (default 4 and 4096); "context-k2", "context-glm5",
// "context-glm45" (the smaller dense MLA, MLA + DSA and GQA models of --context); "k2-real",
// "glm5-real", "glm45-real" (the released Kimi K2, GLM-5 and GLM-4.5 layer shapes with --layers
// layers and --experts routed experts, default 8: many GB even so, meant for --config-only and
// llm_runtime_create_synthetic). --experts also sets the routed experts of the sized presets
// (default 16). Weights: bf16 (default), fp8, int4-g32, int4-g128, int4-g32-all.
//
// --config-only DIR writes only DIR/config.json (creating DIR, replacing the file), for a runtime
// whose weights are made at load (llm_runtime_create_synthetic), and prints the same JSON line.
//
// DIR gets config.json, model.safetensors and a tokenizer (tokenizer.json and
// tokenizer_config.json of --tokenizer DIR, by default the GLM-format test tokenizer of the
// source tree: 3,876 tokens, GLM-4.5's pre-tokenizer and special tokens), which llama.cpp's
// converter needs; llmrt runs without it. DIR is left alone while its config.json equals the one
// the preset and weights give and model.safetensors exists. On success stdout gets one JSON
// line describing the model: {"vocab": N, "weight_bytes_per_token": X, "index_topk": N,
// "wrote": bool}. Exit status 0, 1 when writing or reading failed, 2 for a bad command line.
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <string>

#include "tools/make_bench_model/bench_model.h"

namespace {

using llmrt::bench::BenchConfig;

int Usage() {
  std::fprintf(stderr,
               "usage: llm-make-bench-model --dir DIR [--preset k2|glm45|glm5|context-k2|context-glm5|context-glm45] "
               "[--weights bf16|fp8|int4-g32|int4-g128|int4-g32-all] [--layers N] [--hidden N] [--experts N] "
               "[--tokenizer DIR]\n"
               "       llm-make-bench-model --describe [--preset P] [--weights W] [--layers N] [--hidden N]\n"
               "       llm-make-bench-model --describe-dir DIR\n"
               "       llm-make-bench-model --config-only DIR [--preset P|k2-real|glm5-real|glm45-real] [--weights W] "
               "[--layers N] [--hidden N] [--experts N]\n");
  return 2;
}

bool PresetConfig(const std::string& preset, int64_t layers, int64_t hidden, int64_t experts, BenchConfig* c) {
  if (preset == "k2-real" || preset == "glm5-real" || preset == "glm45-real") {
    if (experts == 0) experts = 8;
    if (layers < 1 || layers > 1024 || experts < 1 || experts > 8192) {
      std::fprintf(stderr, "llm-make-bench-model: --layers must be 1..1024 and --experts 1..8192\n");
      return false;
    }
    return llmrt::bench::RealConfig(preset, layers, experts, c);
  }
  if (preset == "k2" || preset == "glm45" || preset == "glm5") {
    if (layers < 1 || layers > 1024 || hidden < 128 || hidden > 65536 || hidden % 128 != 0) {
      std::fprintf(stderr, "llm-make-bench-model: --layers must be 1..1024 and --hidden a multiple of 128 up to 65536\n");
      return false;
    }
    *c = llmrt::bench::SizedConfig(preset, layers, hidden);
    if (experts != 0) {
      if (experts < 1 || experts > 8192) {
        std::fprintf(stderr, "llm-make-bench-model: --experts must be 1..8192\n");
        return false;
      }
      c->experts = experts;
      c->top_k = std::min<int64_t>(c->top_k, experts);
    }
  } else if (preset == "context-k2") {
    *c = llmrt::bench::ContextConfig(/*dsa=*/false);
  } else if (preset == "context-glm5") {
    *c = llmrt::bench::ContextConfig(/*dsa=*/true);
  } else if (preset == "context-glm45") {
    *c = llmrt::bench::ContextConfig(/*dsa=*/false, /*gqa=*/true);
  } else {
    std::fprintf(stderr, "llm-make-bench-model: unknown preset \"%s\"\n", preset.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, preset = "k2", weights = "bf16", describe_dir, config_only;
#ifdef LLMRT_BENCH_TOKENIZER_DIR
  std::string tokenizer = LLMRT_BENCH_TOKENIZER_DIR;
#else
  std::string tokenizer;
#endif
  int64_t layers = 4, hidden = 4096, experts = 0;
  bool describe = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--describe") {
      describe = true;
      continue;
    }
    if (i + 1 >= argc) return Usage();
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--preset") preset = argv[i + 1];
    else if (a == "--weights") weights = argv[i + 1];
    else if (a == "--layers") layers = std::atoll(argv[i + 1]);
    else if (a == "--hidden") hidden = std::atoll(argv[i + 1]);
    else if (a == "--experts") experts = std::atoll(argv[i + 1]);
    else if (a == "--config-only") config_only = argv[i + 1];
    else if (a == "--tokenizer") tokenizer = argv[i + 1];
    else if (a == "--describe-dir") describe_dir = argv[i + 1];
    else return Usage();
    ++i;
  }
  if (!describe_dir.empty()) {
    llmrt::bench::DirDescription d;
    if (!llmrt::bench::DescribeDir(describe_dir, &d)) return 1;
    const nlohmann::json out = {{"vocab", d.vocab},
                                {"weight_bytes_per_token", d.weight_bytes_per_token},
                                {"index_topk", d.index_topk},
                                {"wrote", false}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  BenchConfig c;
  if (!PresetConfig(preset, layers, hidden, experts, &c)) return 2;
  if (!llmrt::bench::IsKnownWeights(weights) || (dir.empty() && config_only.empty() && !describe)) return Usage();
  c.weights = weights;
  bool wrote = false;
  if (!config_only.empty()) {
    if (!llmrt::bench::WriteConfigOnly(c, config_only)) return 1;
    wrote = true;
  } else if (!describe && !llmrt::bench::WriteCheckpoint(c, dir, tokenizer, &wrote)) {
    return 1;
  }
  const nlohmann::json d = {{"vocab", c.vocab},
                            {"weight_bytes_per_token", llmrt::bench::WeightBytesPerToken(c)},
                            {"index_topk", c.index_topk},
                            {"wrote", wrote}};
  std::printf("%s\n", d.dump().c_str());
  return 0;
}
