// llm-make-bench-model: writes the generated checkpoints llm-bench measures (Kimi K2, GLM-5 and
// GLM-4.5 layer structures with random weights, in every weight format llm-bench compares) and
// describes them. llm-bench runs it for each checkpoint it needs; it links engine internals
// (`WriteSafetensors`) so that llm-bench can stay a client of the public header alone.
//
//   llm-make-bench-model --dir DIR [--preset P] [--weights W]   write DIR unless it is current
//   llm-make-bench-model --describe [--preset P] [--weights W]  write nothing
//
// Presets: "k2" (default: the 2.4 GB BF16 Kimi-K2-structure model of llm-bench's decode,
// --integrity and --formats modes), "context-k2", "context-glm5", "context-glm45" (the smaller
// dense MLA, MLA + DSA and GQA models of --context). Weights: bf16 (default), fp8, int4-g32,
// int4-g128, int4-g32-all.
//
// DIR gets config.json and model.safetensors; it is left alone while its config.json equals the
// one the preset and weights give and model.safetensors exists. On success stdout gets one JSON
// line describing the model: {"vocab": N, "weight_bytes_per_token": X, "index_topk": N,
// "wrote": bool}. Exit status 0, 1 when writing failed, 2 for a bad command line.
#include <cstdio>
#include <string>

#include "tools/make_bench_model/bench_model.h"

namespace {

using llmrt::bench::BenchConfig;

int Usage() {
  std::fprintf(stderr,
               "usage: llm-make-bench-model --dir DIR [--preset k2|context-k2|context-glm5|context-glm45] "
               "[--weights bf16|fp8|int4-g32|int4-g128|int4-g32-all]\n"
               "       llm-make-bench-model --describe [--preset P] [--weights W]\n");
  return 2;
}

bool PresetConfig(const std::string& preset, BenchConfig* c) {
  if (preset == "k2") *c = BenchConfig{};
  else if (preset == "context-k2") *c = llmrt::bench::ContextConfig(/*dsa=*/false);
  else if (preset == "context-glm5") *c = llmrt::bench::ContextConfig(/*dsa=*/true);
  else if (preset == "context-glm45") *c = llmrt::bench::ContextConfig(/*dsa=*/false, /*gqa=*/true);
  else return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, preset = "k2", weights = "bf16";
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
    else return Usage();
    ++i;
  }
  BenchConfig c;
  if (!PresetConfig(preset, &c) || !llmrt::bench::IsKnownWeights(weights) || (dir.empty() && !describe)) {
    return Usage();
  }
  c.weights = weights;
  bool wrote = false;
  if (!describe && !llmrt::bench::WriteCheckpoint(c, dir, &wrote)) return 1;
  const nlohmann::json d = {{"vocab", c.vocab},
                            {"weight_bytes_per_token", llmrt::bench::WeightBytesPerToken(c)},
                            {"index_topk", c.index_topk},
                            {"wrote", wrote}};
  std::printf("%s\n", d.dump().c_str());
  return 0;
}
