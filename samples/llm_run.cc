// llm-run: generates with a checkpoint, streaming the text (or token ids) as it comes.
//
//   llm-run --model DIR --prompt TEXT [--chat] [--system TEXT] [--max-tokens N]
//           [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed S]
//           [--threads N] [--kv-dtype bf16|f32|fp8] [--tp N [--ep]] [--activations exact|int8|bf16|fp8]
//           [--backend auto|cpu|cuda]
//   llm-run --model DIR --prompt-ids 1,2,3 [...]     (token ids in, token ids out)
//
// With --prompt the checkpoint's tokenizer encodes the prompt (with --chat, inside the family's
// chat format) and the continuation streams to stdout as text. Load time and speed go to stderr.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llmrt/llmrt.h"

namespace {

void Usage() {
  std::fprintf(stderr,
               "usage: llm-run --model DIR (--prompt TEXT [--chat] [--system TEXT] | --prompt-ids ID,ID,...)\n"
               "               [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P]\n"
               "               [--seed S] [--threads N] [--kv-dtype bf16|f32|fp8] [--tp N [--ep]]\n"
               "               [--backend auto|cpu|cuda]\n"
               "  --backend: auto (default: the GPU where one is present and the CUDA backend is\n"
               "          built), cpu, or cuda (an error without a device)\n"
               "  --tp N: split the model over N tensor-parallel ranks (threads); --ep: routed experts\n"
               "          partitioned among them rather than split by column\n"
               "  --prefill-weights W, --decode-weights W: the routed experts' storage per phase\n"
               "          (as-stored, int4-g32 or int4-g128; INT4 is quantized at load)\n"
               "  --activations int8: quantized (INT4) matmuls round activations to int8 per 32 values and\n"
               "          use integer dot products (faster on CPUs, slightly different numerics)\n"
               "  --activations bf16: BF16 matmuls round activations to bf16 and use bf16 dot products\n"
               "  --activations fp8: FP8 block-weight matmuls round activations to e4m3 per 128 values\n"
               "          and multiply codes by codes (block-scaled GEMM); BF16 matmuls as under bf16\n");
}

bool ParseIds(const char* s, std::vector<int32_t>* out) {
  while (*s) {
    char* end = nullptr;
    long v = std::strtol(s, &end, 10);
    if (end == s || v < INT32_MIN || v > INT32_MAX) return false;
    out->push_back(static_cast<int32_t>(v));
    s = end;
    if (*s == ',') ++s;
    else if (*s) return false;
  }
  return !out->empty();
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  const char* model = nullptr;
  const char* prompt_text = nullptr;
  const char* system_text = nullptr;
  bool chat = false;
  std::vector<int32_t> prompt;
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.flags = LLM_SAMPLING_NO_LOGITS;  // only the sampled ids come back
  so.max_new_tokens = 32;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto need = [&]() {
      if (v == nullptr) {
        std::fprintf(stderr, "llm-run: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      ++i;
      return v;
    };
    if (a == "--model") model = need();
    else if (a == "--prompt") prompt_text = need();
    else if (a == "--system") system_text = need();
    else if (a == "--chat") chat = true;
    else if (a == "--prompt-ids") {
      if (!ParseIds(need(), &prompt)) {
        std::fprintf(stderr, "llm-run: --prompt-ids wants comma-separated integers\n");
        return 2;
      }
    } else if (a == "--max-tokens") so.max_new_tokens = static_cast<uint32_t>(std::atoi(need()));
    else if (a == "--temperature") so.temperature = static_cast<float>(std::atof(need()));
    else if (a == "--top-k") so.top_k = std::atoi(need());
    else if (a == "--top-p") so.top_p = static_cast<float>(std::atof(need()));
    else if (a == "--min-p") so.min_p = static_cast<float>(std::atof(need()));
    else if (a == "--seed") so.seed = std::strtoull(need(), nullptr, 10);
    else if (a == "--threads") ro.num_threads = std::atoi(need());
    else if (a == "--tp") ro.tensor_parallel = static_cast<uint32_t>(std::atoi(need()));
    else if (a == "--ep") ro.expert_parallel = 1;
    else if (a == "--backend") {
      const std::string b = need();
      if (b != "auto" && b != "cpu" && b != "cuda") {
        std::fprintf(stderr, "llm-run: --backend must be auto, cpu or cuda, not %s\n", b.c_str());
        return 2;
      }
      ro.backend = b == "cpu" ? LLM_BACKEND_CPU : b == "cuda" ? LLM_BACKEND_CUDA : LLM_BACKEND_AUTO;
    }
    else if (a == "--activations") {
      const std::string p = need();
      if (p != "exact" && p != "int8" && p != "bf16" && p != "fp8") {
        std::fprintf(stderr, "llm-run: --activations must be exact, int8, bf16 or fp8, not %s\n", p.c_str());
        return 2;
      }
      ro.quantized_activations = p == "int8"   ? LLM_ACTIVATIONS_INT8
                                 : p == "bf16" ? LLM_ACTIVATIONS_BF16
                                 : p == "fp8"  ? LLM_ACTIVATIONS_FP8
                                               : LLM_ACTIVATIONS_EXACT;
    }
    else if (a == "--prefill-weights" || a == "--decode-weights") {
      const std::string p = need();
      int32_t w = LLM_WEIGHTS_AS_STORED;
      if (p == "int4-g32") w = LLM_WEIGHTS_INT4_G32;
      else if (p == "int4-g128") w = LLM_WEIGHTS_INT4_G128;
      else if (p != "as-stored") {
        std::fprintf(stderr, "llm-run: %s must be as-stored, int4-g32 or int4-g128, not %s\n", a.c_str(), p.c_str());
        return 2;
      }
      (a == "--prefill-weights" ? ro.prefill_weights : ro.decode_weights) = w;
    } else if (a == "--kv-dtype") {
      std::string d = need();
      ro.kv_dtype = d == "f32" ? LLM_KV_DTYPE_F32 : d == "fp8" ? LLM_KV_DTYPE_FP8_E4M3 : LLM_KV_DTYPE_BF16;
    } else if (a == "--help" || a == "-h") {
      Usage();
      return 0;
    } else {
      std::fprintf(stderr, "llm-run: unknown argument %s\n", a.c_str());
      Usage();
      return 2;
    }
  }
  if (model == nullptr || (prompt.empty() == (prompt_text == nullptr))) {
    Usage();
    return 2;
  }
  llm_tokenizer* tok = nullptr;
  llm_detokenizer* detok = nullptr;
  std::vector<int32_t> stops;
  if (prompt_text != nullptr) {
    llm_status ts = llm_tokenizer_create(model, &tok);
    if (ts != LLM_OK) {
      std::fprintf(stderr, "llm-run: %s: %s\n", llm_status_string(ts), llm_last_error());
      return 1;
    }
    llm_tokenizer_info ti;
    ti.struct_size = sizeof(ti);
    llm_tokenizer_get_info(tok, &ti);
    std::string text = prompt_text;
    if (chat) {
      std::vector<llm_chat_message> msgs;
      if (system_text) msgs.push_back({"system", system_text});
      msgs.push_back({"user", prompt_text});
      size_t len = 0;
      llm_chat_apply_template(tok, msgs.data(), msgs.size(), 1, 0, nullptr, 0, &len);
      text.assign(len + 1, '\0');
      llm_chat_apply_template(tok, msgs.data(), msgs.size(), 1, 0, text.data(), text.size(), &len);
      text.resize(len);
      for (const char* s : {"<|im_end|>", "<|user|>", "<|observation|>"}) {
        int32_t id = -1;
        if (llm_tokenizer_special_id(tok, s, &id) == LLM_OK) stops.push_back(id);
      }
    }
    if (ti.eos_id >= 0) stops.push_back(ti.eos_id);
    size_t n = 0;
    llm_tokenize(tok, text.data(), text.size(), chat ? 1 : 0, nullptr, 0, &n);
    prompt.resize(n);
    if (llm_tokenize(tok, text.data(), text.size(), chat ? 1 : 0, prompt.data(), prompt.size(), &n) != LLM_OK || n == 0) {
      std::fprintf(stderr, "llm-run: the prompt encodes to no tokens\n");
      llm_tokenizer_destroy(tok);
      return 1;
    }
    llm_detokenizer_create(tok, /*skip_special=*/1, &detok);
    if (!chat) {
      std::fputs(prompt_text, stdout);  // the continuation follows the prompt
      std::fflush(stdout);
    }
    so.stop_tokens = stops.data();
    so.num_stop_tokens = static_cast<uint32_t>(stops.size());
  }
  auto t0 = std::chrono::steady_clock::now();
  llm_runtime* rt = nullptr;
  llm_status st = llm_runtime_create(model, &ro, &rt);
  if (st != LLM_OK) {
    std::fprintf(stderr, "llm-run: %s: %s\n", llm_status_string(st), llm_last_error());
    return 1;
  }
  auto t1 = std::chrono::steady_clock::now();
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rt, &info);
  std::fprintf(stderr, "llm-run: loaded %s (%s), %llu parameters, %.1f MB weights in %.3f s\n",
               info.architecture, info.model_type, static_cast<unsigned long long>(info.num_parameters),
               info.weight_bytes / 1e6, Seconds(t0, t1));
  llm_session* s = nullptr;
  st = llm_session_create(rt, &so, &s);
  if (st == LLM_OK) st = llm_session_append_tokens(s, prompt.data(), prompt.size());
  if (st != LLM_OK) {
    std::fprintf(stderr, "llm-run: %s: %s\n", llm_status_string(st), llm_last_error());
    llm_session_destroy(s);
    llm_runtime_destroy(rt);
    return 1;
  }
  int rc = 0;
  size_t generated = 0;
  double prefill_s = 0;
  auto t2 = std::chrono::steady_clock::now();
  auto t_first = t2;
  for (;;) {
    llm_step_result r;
    size_t n = 0;
    st = llm_decode_step(rt, &r, 1, &n);
    if (st != LLM_OK) {
      std::fprintf(stderr, "\nllm-run: %s: %s\n", llm_status_string(st), llm_last_error());
      rc = 1;
      break;
    }
    if (n == 0) break;
    if (r.status != LLM_OK) {
      std::fprintf(stderr, "\nllm-run: session failed: %s\n", llm_status_string(r.status));
      rc = 1;
      break;
    }
    if (r.token != LLM_TOKEN_NONE) {
      if (generated == 0) {
        t_first = std::chrono::steady_clock::now();
        prefill_s = Seconds(t2, t_first);
      }
      if (detok != nullptr) {
        char buf[1024];
        size_t len = 0;
        if (llm_detokenizer_push(detok, r.token, buf, sizeof(buf), &len) == LLM_OK) std::fwrite(buf, 1, len, stdout);
      } else {
        std::printf(generated == 0 ? "%d" : " %d", r.token);
      }
      std::fflush(stdout);
      ++generated;
    }
    if (r.finish_reason != LLM_FINISH_NONE) break;
  }
  if (detok != nullptr) {
    char buf[64];
    size_t len = 0;
    if (llm_detokenizer_flush(detok, buf, sizeof(buf), &len) == LLM_OK) std::fwrite(buf, 1, len, stdout);
  }
  std::printf("\n");
  std::fflush(stdout);
  auto t3 = std::chrono::steady_clock::now();
  const double decode_s = Seconds(t_first, t3);
  std::fprintf(stderr, "llm-run: prompt %zu tokens in %.3f s (%.1f tok/s); generated %zu tokens, %.1f tok/s decode\n",
               prompt.size(), prefill_s, prefill_s > 0 ? prompt.size() / prefill_s : 0.0, generated,
               generated > 1 && decode_s > 0 ? (generated - 1) / decode_s : 0.0);
  llm_session_destroy(s);
  llm_runtime_destroy(rt);
  llm_detokenizer_destroy(detok);
  llm_tokenizer_destroy(tok);
  return rc;
}
