// llm-eval: perplexity and top-1 next-token accuracy of a checkpoint over a text file, through
// the C ABI. The text is tokenized with the checkpoint's tokenizer (no special tokens) and cut
// into non-overlapping windows of --window tokens (the last partial window is dropped); within
// each window every position but the first is scored given the ones before it.
//
//   llm-eval --model DIR --text FILE [--window 128] [--max-windows N] [--kv-dtype bf16|f32|fp8|fp8-tiled]
//            [--chunk N] [--weights as-stored|int4-g32|int4-g128] [--activations exact|int8|bf16|fp8]
//            [--backend cpu|cuda|auto]
//
// --activations int8 / bf16 / fp8 runs the INT8 / BF16 / FP8 activation policy
// (llm_runtime_options.quantized_activations); --agree-exact compares top-1 predictions with the
// same model and options under EXACT (the agreement of the policy with the reference numerics).
//
// Each window is scored by teacher forcing in passes of at most --chunk tokens (default 512).
// A pass attends over its own positions in BF16 under the FP8 KV phase policy, so measuring an
// FP8 KV cache as decode sees it takes --chunk 1 (every earlier position read from the cache).
//            [--threads N]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llmrt/llmrt.h"

int main(int argc, char** argv) {
  std::string model, text_path;
  size_t window = 128, max_windows = 0;
  std::string agree_with;
  bool agree_exact = false;
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--model") model = v;
    else if (a == "--text") text_path = v;
    else if (a == "--window") window = std::strtoul(v, nullptr, 10);
    else if (a == "--max-windows") max_windows = std::strtoul(v, nullptr, 10);
    else if (a == "--threads") ro.num_threads = std::atoi(v);
    else if (a == "--kv-dtype") {
      const std::string d = v;
      ro.kv_dtype = d == "f32"         ? LLM_KV_DTYPE_F32
                    : d == "fp8"       ? LLM_KV_DTYPE_FP8_E4M3
                    : d == "fp8-tiled" ? LLM_KV_DTYPE_FP8_E4M3_TILED
                                       : LLM_KV_DTYPE_BF16;
    }
    else if (a == "--agree-with") agree_with = v;
    else if (a == "--chunk") ro.max_tokens_per_step = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    else if (a == "--agree-exact") {
      agree_exact = std::string(v) == "1";
    }
    else if (a == "--activations") {
      const std::string p = v;
      if (p != "exact" && p != "int8" && p != "bf16" && p != "fp8") {
        std::fprintf(stderr, "llm-eval: --activations must be exact, int8, bf16 or fp8, not %s\n", v);
        return 2;
      }
      ro.quantized_activations = p == "int8"   ? LLM_ACTIVATIONS_INT8
                                 : p == "bf16" ? LLM_ACTIVATIONS_BF16
                                 : p == "fp8"  ? LLM_ACTIVATIONS_FP8
                                               : LLM_ACTIVATIONS_EXACT;
    }
    else if (a == "--backend") {
      const std::string b = v;
      if (b != "cpu" && b != "cuda" && b != "auto") {
        std::fprintf(stderr, "llm-eval: --backend must be cpu, cuda or auto, not %s\n", v);
        return 2;
      }
      ro.backend = b == "cpu" ? LLM_BACKEND_CPU : b == "cuda" ? LLM_BACKEND_CUDA : LLM_BACKEND_AUTO;
    }
    else if (a == "--weights") {
      const std::string w = v;
      ro.prefill_weights = ro.decode_weights = w == "int4-g32"    ? LLM_WEIGHTS_INT4_G32
                                               : w == "int4-g128" ? LLM_WEIGHTS_INT4_G128
                                                                  : LLM_WEIGHTS_AS_STORED;
    }
    else {
      std::fprintf(stderr, "llm-eval: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (model.empty() || text_path.empty() || window < 2) {
    std::fprintf(stderr, "usage: llm-eval --model DIR --text FILE [--window 128] [--max-windows N] [--kv-dtype bf16|f32|fp8|fp8-tiled] [--threads N]\n"
                         "                [--chunk N] [--weights as-stored|int4-g32|int4-g128] [--agree-with DIR]\n"
                         "                [--activations exact|int8|bf16|fp8] [--agree-exact 1] [--backend cpu|cuda|auto]\n");
    return 2;
  }
  std::ifstream in(text_path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "llm-eval: cannot read %s\n", text_path.c_str());
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  llm_tokenizer* tok = nullptr;
  llm_runtime* rt = nullptr;
  llm_status st = llm_tokenizer_create(model.c_str(), &tok);
  if (st == LLM_OK) st = llm_runtime_create(model.c_str(), &ro, &rt);
  // --agree-with DIR: the reference whose top-1 predictions are compared (DIR's checkpoint as
  // stored, BF16 KV, default passes; e.g. the BF16 model a quantized one came from).
  llm_runtime* ref = nullptr;
  if (st == LLM_OK && !agree_with.empty()) st = llm_runtime_create(agree_with.c_str(), nullptr, &ref);
  if (st == LLM_OK && agree_with.empty() && agree_exact) {
    llm_runtime_options exact = ro;
    exact.quantized_activations = LLM_ACTIVATIONS_EXACT;
    st = llm_runtime_create(model.c_str(), &exact, &ref);
  }
  if (st != LLM_OK) {
    std::fprintf(stderr, "llm-eval: %s: %s\n", llm_status_string(st), llm_last_error());
    llm_tokenizer_destroy(tok);
    return 1;
  }
  size_t n = 0;
  llm_tokenize(tok, text.data(), text.size(), 0, nullptr, 0, &n);
  std::vector<int32_t> ids(n);
  llm_tokenize(tok, text.data(), text.size(), 0, ids.data(), ids.size(), &n);
  size_t windows = n > 0 ? (n - 1) / window : 0;
  if (max_windows > 0 && windows > max_windows) windows = max_windows;
  double nll = 0;
  size_t correct = 0, scored = 0, agreed = 0;
  std::vector<float> lp(window - 1), lp_ref(window - 1);
  std::vector<int32_t> am(window - 1), am_ref(window - 1);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t w = 0; w < windows; ++w) {
    const int32_t* win = ids.data() + w * window;
    st = llm_score(rt, win, window, lp.data(), am.data());
    if (st != LLM_OK) {
      std::fprintf(stderr, "llm-eval: %s: %s\n", llm_status_string(st), llm_last_error());
      return 1;
    }
    if (ref != nullptr && llm_score(ref, win, window, lp_ref.data(), am_ref.data()) != LLM_OK) {
      std::fprintf(stderr, "llm-eval: %s\n", llm_last_error());
      return 1;
    }
    for (size_t p = 0; p + 1 < window; ++p) {
      if (ref != nullptr) agreed += am[p] == am_ref[p];
      nll -= lp[p];
      correct += am[p] == win[p + 1];
      ++scored;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rt, &info);
  std::printf("| model | text | tokens | windows x len | scored | perplexity | top-1 accuracy | tokens/s |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %s | %s | %zu | %zu x %zu | %zu | %.4f | %.4f | %.0f |\n", model.c_str(), text_path.c_str(), n, windows,
              window, scored, scored ? std::exp(nll / scored) : 0.0, scored ? static_cast<double>(correct) / scored : 0.0,
              secs > 0 ? windows * window / secs : 0.0);
  if (ref != nullptr) {
    std::printf(agree_exact && agree_with.empty() ? "\ntop-1 agreement with EXACT activations: %.4f\n"
                                                  : "\ntop-1 agreement with the reference (BF16 KV): %.4f\n",
                scored ? static_cast<double>(agreed) / scored : 0.0);
    llm_runtime_destroy(ref);
  }
  llm_runtime_destroy(rt);
  llm_tokenizer_destroy(tok);
  return 0;
}
