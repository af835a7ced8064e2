// llm-bench: decode throughput of the CPU backend on a generated checkpoint large enough that
// every decode step streams its weights from memory (or on any checkpoint, --model), and the
// achieved weight-read bandwidth at batch 1 against a read-only streaming bandwidth measured in
// the same run. Prints tables; times nothing in tests.
//
//   llm-bench [--model DIR | --dir DIR [--preset k2|glm45|glm5] [--weights W] [--layers N] [--hidden N]]
//             [--sessions 1,4,16,64] [--steps N] [--threads N] [--prompt N] [--tp N] [--no-baselines]
//             [--activations exact|int8|bf16|fp8] (llm_runtime_options.quantized_activations; every mode)
//             [--backend cpu|cuda|auto]         (llm_runtime_options.backend; every mode, default auto;
//                                               cuda: checked before a checkpoint is written)
//             [--weight-memory auto|mapped|huge-pages] (llm_runtime_options.weight_memory; every mode)
//             [--kv bf16|f32|fp8|fp8-tiled]     (llm_runtime_options.kv_dtype; decode and prefill modes)
//             [--kv-gib G]                      (the decode mode's KV budget, default 0.5 GiB)
//   llm-bench --synthetic [--preset k2|glm45|glm5|k2-real|glm5-real|glm45-real] [--weights W] [--layers N]
//             [--hidden N] [--experts N] [--seed N] [decode or --prefill-lens options]
//   llm-bench --prefill-lens 128,512 [--model DIR | generated as above] [--repeats N] [--threads N]
//   llm-bench --tokens DIR --text TEXT   (the ids of TEXT, comma-separated; TEXT itself, not a file)
//   llm-bench --integrity [--model DIR | --synthetic ...] [--sessions 1,8,64] [--steps N] [--repeats N]
//   llm-bench --tokenize DIR --text FILE [--repeats N]
//   llm-bench --kv-table DIR[,DIR...] [--budget-gib N] [--session-tokens N]
//   llm-bench --kv-table DIR[,DIR...] --tp N --device-gib G   (per-device weights and KV under TP)
//   llm-bench --context 256,2048 [--sessions 1,4] [--steps N]
//   llm-bench --formats bf16,fp8,int4-g32,int4-g128,int4-g32-all [--sessions 1,16,64] [--steps N]
//
// --formats writes the generated model in each weight format (next to DIR) and reports decode
// and prefill speed per format, plus BF16 weights with the FP8 KV codec, as ratios to BF16.
//
// --kv-table sizes the KV cache of each model directory (config.json only; tests/data/configs
// holds the released Kimi K2, GLM-5 and GLM-4.5 configs) per codec with llm_model_kv_sizing.
// --context compares generated Kimi-K2-structure (dense MLA), GLM-5-structure (MLA + DSA indexer,
// index_topk 512) and GLM-4.5-structure (GQA) models of the same hidden size, layers and MoE,
// prefilling each session to the given context lengths: below index_topk the MLA models attend
// densely, above it GLM-5 attends to 512 positions.
//
// --integrity compares decode throughput and p95 step latency with the no-op tracker, the
// built-in tag checker and a host callback tracker (counting events), interleaving the three in
// every repeat so machine noise hits them alike; it reports ratios to no-op with their spread.
//
// The decode and prefill modes measure --model DIR when given, else a generated checkpoint:
// --preset k2 (default: Kimi K2's DeepseekV3 structure), glm45 (GLM-4.5: GQA) or glm5 (GLM-5:
// MLA + DSA), --layers (4) layers of --hidden (4096) width, in --weights bf16 (default), fp8,
// int4-g32, int4-g128 or int4-g32-all. The default checkpoint (about 2.4 GB BF16) is written once to DIR
// (default /tmp/llmrt-bench-model; other presets, weights and sizes get DIR-PRESET-WEIGHTS-LxH)
// and reused while its config matches, by llm-make-bench-model (tools/make_bench_model), which
// llm-bench runs from beside its own binary or from --generator PATH. llm-bench itself uses only
// the public header: one file per mode under samples/bench/.
//
// --synthetic (decode, prefill and integrity modes) writes no checkpoint: only the preset's
// config.json goes to a temporary directory (llm-make-bench-model --config-only), and the runtime
// generates its weights at load (llm_runtime_create_synthetic, seed --seed, default 1) in the
// format --weights declares. Tokens are meaningless; speed, memory and load time are those of real
// shapes. The "-real" presets are the released Kimi K2 (hidden 7168, 64 heads, q_lora 1536, kv_lora
// 512, experts of 2048 columns, vocabulary 163840), GLM-5 (with its DSA indexer) and GLM-4.5 (GQA)
// layer shapes with --layers layers (default 4) and --experts routed experts (default 8); at these
// widths even a few layers are several GB. The decode table's header reports the time from the
// creating call to the first sampled token.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "modes.h"

namespace llm_bench {
namespace {

// --backend cuda in a mode that writes a checkpoint first: whether a CUDA runtime can be made
// here at all, asked of a synthetic runtime over a config.json alone before gigabytes are
// written (a machine without a device answers at once). False with the reason printed.
bool CudaRunsHere(const ModelGenerator& gen) {
  char tmpl[] = "/tmp/llmrt-bench-probe-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return true;  // the run itself will say what is wrong
  GeneratedModel cfg;
  bool ok = true;
  if (gen.EnsureConfig(tmpl, "k2", "bf16", &cfg)) {
    llm_runtime_options o;
    llm_runtime_options_init(&o);
    o.backend = LLM_BACKEND_CUDA;
    o.kv_budget_bytes = 64u << 20;
    llm_runtime* rt = nullptr;
    if (llm_runtime_create_synthetic(tmpl, 1, &o, &rt) == LLM_ERR_UNSUPPORTED) {
      std::fprintf(stderr, "llm-bench: --backend cuda: %s\n", llm_last_error());
      ok = false;
    }
    if (rt != nullptr) llm_runtime_destroy(rt);
  }
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  return ok;
}

void Usage(FILE* f) {
  std::fprintf(f, "usage: llm-bench [--model DIR | --dir DIR [--preset k2|glm45|glm5] [--weights W] [--layers N] "
               "[--hidden N]]\n"
               "                 [--sessions 1,4,16,64] [--steps N] [--threads N] [--prompt N] [--tp N] [--no-baselines]\n"
               "       llm-bench --synthetic [--preset k2|glm45|glm5|k2-real|glm5-real|glm45-real] [--weights W] "
               "[--layers N] [--hidden N] [--experts N] [--seed N] [decode or --prefill-lens options]\n"
               "       (every mode takes [--backend cpu|cuda|auto] and [--activations exact|int8|bf16|fp8];\n"
               "        decode and prefill take [--kv bf16|f32|fp8|fp8-tiled], decode [--kv-gib G])\n"
               "       llm-bench --prefill-lens 128,512 [--model DIR | generated as above] [--repeats N] "
               "[--threads N]\n"
               "       llm-bench --tokens DIR --text TEXT\n"
               "       llm-bench --integrity [--model DIR] [--sessions 1,8,64] [--steps N] [--repeats N]\n"
               "       llm-bench --tokenize DIR --text FILE [--repeats N]\n"
               "       llm-bench --kv-table DIR[,DIR...] [--budget-gib N] [--session-tokens N]\n"
               "       llm-bench --context 256,2048 [--sessions 1,4] [--steps N]\n"
               "       llm-bench --formats bf16,fp8,int4-g32,int4-g128,int4-g32-all [--sessions 1,16,64] "
               "[--steps N] [--prefill N]\n"
               "       (modes that generate a checkpoint also take [--generator PATH] to llm-make-bench-model)\n");
}

int Main(int argc, char** argv) {
  fs::path dir = "/tmp/llmrt-bench-model";
  std::vector<int> batches = {1, 4, 16, 64};
  int steps = 8, threads = 0, prompt_len = 8, repeats = 5;
  bool integrity = false;
  std::string model, tokenize_dir, text_file, kv_table, formats, generator, tokens_dir;
  std::string preset = "k2", weights = "bf16";
  int layers = 4, hidden = 4096, experts = 0;
  bool synthetic = false;
  std::vector<int> prefill_lens;
  bool dir_given = false, baselines = true;
  int prefill_len = 256;
  std::vector<int> contexts;
  double budget_gib = 64;
  double device_gib = 0;
  int session_tokens = 8192;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--integrity") {
      integrity = true;
      continue;
    }
    if (a == "--no-baselines") {
      baselines = false;
      continue;
    }
    if (a == "--synthetic") {
      synthetic = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      Usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "llm-bench: %s needs a value (or is no option: --help lists them)\n", a.c_str());
      return 2;
    }
    if (a == "--dir") dir = argv[i + 1], dir_given = true;
    else if (a == "--preset") preset = argv[i + 1];
    else if (a == "--weights") weights = argv[i + 1];
    else if (a == "--layers") layers = std::atoi(argv[i + 1]);
    else if (a == "--hidden") hidden = std::atoi(argv[i + 1]);
    else if (a == "--prefill-lens") prefill_lens = ParseList(argv[i + 1]);
    else if (a == "--tokens") tokens_dir = argv[i + 1];
    else if (a == "--model") model = argv[i + 1];
    else if (a == "--tokenize") tokenize_dir = argv[i + 1];
    else if (a == "--text") text_file = argv[i + 1];
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (a == "--sessions") batches = ParseList(argv[i + 1]);
    else if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--tp") g_tensor_parallel = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    else if (a == "--activations") {
      const std::string v = argv[i + 1];
      if (v != "exact" && v != "int8" && v != "bf16" && v != "fp8") {
        std::fprintf(stderr, "llm-bench: --activations wants exact, int8, bf16 or fp8, got '%s'\n", v.c_str());
        return 2;
      }
      g_quantized_activations = v == "int8"   ? LLM_ACTIVATIONS_INT8
                                : v == "bf16" ? LLM_ACTIVATIONS_BF16
                                : v == "fp8"  ? LLM_ACTIVATIONS_FP8
                                              : LLM_ACTIVATIONS_EXACT;
    }
    else if (a == "--weight-memory") {
      const std::string v = argv[i + 1];
      if (v != "auto" && v != "mapped" && v != "huge-pages") {
        std::fprintf(stderr, "llm-bench: --weight-memory wants auto, mapped or huge-pages, got '%s'\n", v.c_str());
        return 2;
      }
      g_weight_memory = v == "mapped"       ? LLM_WEIGHT_MEMORY_MAPPED
                        : v == "huge-pages" ? LLM_WEIGHT_MEMORY_HUGE_PAGES
                                            : LLM_WEIGHT_MEMORY_AUTO;
    }
    else if (a == "--backend") {
      const std::string v = argv[i + 1];
      if (v != "cpu" && v != "cuda" && v != "auto") {
        std::fprintf(stderr, "llm-bench: --backend wants cpu, cuda or auto, got '%s'\n", v.c_str());
        return 2;
      }
      g_backend = v == "cpu" ? LLM_BACKEND_CPU : v == "cuda" ? LLM_BACKEND_CUDA : LLM_BACKEND_AUTO;
    }
    else if (a == "--kv") {
      const std::string v = argv[i + 1];
      if (v != "bf16" && v != "f32" && v != "fp8" && v != "fp8-tiled") {
        std::fprintf(stderr, "llm-bench: --kv wants bf16, f32, fp8 or fp8-tiled, got '%s'\n", v.c_str());
        return 2;
      }
      g_kv_dtype = v == "bf16"  ? LLM_KV_DTYPE_BF16
                   : v == "f32" ? LLM_KV_DTYPE_F32
                   : v == "fp8" ? LLM_KV_DTYPE_FP8_E4M3
                                : LLM_KV_DTYPE_FP8_E4M3_TILED;
    }
    else if (a == "--kv-gib") g_kv_gib = std::atof(argv[i + 1]);
    else if (a == "--experts") experts = std::atoi(argv[i + 1]);
    else if (a == "--seed") g_synthetic_seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--prompt") prompt_len = std::atoi(argv[i + 1]);
    else if (a == "--kv-table") kv_table = argv[i + 1];
    else if (a == "--budget-gib") budget_gib = std::atof(argv[i + 1]);
    else if (a == "--device-gib") device_gib = std::atof(argv[i + 1]);
    else if (a == "--session-tokens") session_tokens = std::atoi(argv[i + 1]);
    else if (a == "--context") contexts = ParseList(argv[i + 1]);
    else if (a == "--formats") formats = argv[i + 1];
    else if (a == "--prefill") prefill_len = std::atoi(argv[i + 1]);
    else if (a == "--generator") generator = argv[i + 1];
    else {
      Usage(stderr);
      return 2;
    }
    ++i;
  }
  if (!tokens_dir.empty()) return RunTokenIds(tokens_dir, text_file);
  if (!tokenize_dir.empty()) return RunTokenizeBench(tokenize_dir, text_file, repeats);
  if (!kv_table.empty() && device_gib > 0) {
    return RunRankSizing(SplitList(kv_table), static_cast<int>(g_tensor_parallel), device_gib, session_tokens);
  }
  if (!kv_table.empty()) return RunKvTable(SplitList(kv_table), budget_gib, session_tokens);
  ModelGenerator gen = ModelGenerator::Find(generator);
  gen.SetSize(layers, hidden);
  gen.SetExperts(experts);
  if (synthetic) {
    if (!model.empty() || !formats.empty() || !contexts.empty()) {
      std::fprintf(stderr, "llm-bench: --synthetic makes the --preset model for the decode, prefill and integrity modes\n");
      return 2;
    }
    // Only config.json, in a directory of its own that goes when the run ends.
    char tmpl[] = "/tmp/llmrt-bench-synthetic-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("llm-bench: mkdtemp");
      return 1;
    }
    const fs::path tmp = tmpl;
    GeneratedModel cfg;
    int rc = 1;
    if (gen.EnsureConfig(tmp, preset, weights, &cfg)) {
      g_synthetic = true;
      if (integrity) {
        std::vector<int> b = batches == std::vector<int>{1, 4, 16, 64} ? std::vector<int>{1, 8, 64} : batches;
        rc = RunIntegrityBench(tmp.string(), b, steps, repeats, threads);
      } else {
        rc = !prefill_lens.empty() ? RunPrefillBench(tmp, cfg, prefill_lens, repeats, threads)
                                   : RunDecodeBench(tmp, cfg, batches, steps, threads, prompt_len, baselines);
      }
    }
    std::error_code ec;
    fs::remove_all(tmp, ec);
    return rc;
  }
  if (g_backend == LLM_BACKEND_CUDA && (model.empty() || !formats.empty() || !contexts.empty()) && !CudaRunsHere(gen)) {
    return 1;
  }
  if (!formats.empty()) {
    std::vector<int> b = batches == std::vector<int>{1, 4, 16, 64} ? std::vector<int>{1, 16, 64} : batches;
    return RunFormatBench(gen, dir, SplitList(formats), b, steps, threads, prefill_len);
  }
  if (!contexts.empty()) {
    std::vector<int> b = batches == std::vector<int>{1, 4, 16, 64} ? std::vector<int>{1, 4} : batches;
    return RunContextBench(gen, dir.parent_path() / "llmrt-bench-context", contexts, b, steps, threads);
  }
  if (integrity) {
    if (model.empty()) {
      GeneratedModel m;
      if (!gen.Ensure(dir, "k2", "bf16", &m)) return 1;
      model = dir.string();
    }
    std::vector<int> b = batches == std::vector<int>{1, 4, 16, 64} ? std::vector<int>{1, 8, 64} : batches;
    return RunIntegrityBench(model, b, steps, repeats, threads);
  }
  // The decode and prefill modes: --model, or the generated checkpoint of --preset.
  GeneratedModel cfg;
  if (!model.empty()) {
    dir = model;
    if (!gen.DescribeDir(dir, &cfg)) return 1;
  } else {
    if (!dir_given && (preset != "k2" || weights != "bf16" || layers != 4 || hidden != 4096)) {
      dir += "-" + preset + "-" + weights + "-" + std::to_string(layers) + "x" + std::to_string(hidden);
    }
    if (!gen.Ensure(dir, preset, weights, &cfg)) return 1;
  }
  if (!prefill_lens.empty()) return RunPrefillBench(dir, cfg, prefill_lens, repeats, threads);
  return RunDecodeBench(dir, cfg, batches, steps, threads, prompt_len, baselines);
}

}  // namespace
}  // namespace llm_bench

int main(int argc, char** argv) { return llm_bench::Main(argc, argv); }
