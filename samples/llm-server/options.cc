#include "options.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace llm_server {
namespace {

void Usage(FILE* f) {
  std::fprintf(f,
               "usage: llm-server --model DIR [--port N] [--host ADDR] [--served-model-name NAME]\n"
               "                  [--backend auto|cpu|cuda] [--threads N] [--kv-dtype bf16|f32|fp8|fp8-tiled]\n"
               "                  [--kv-integrity off|tags] [--kv-pressure fail|queue|preempt] [--kv-budget-mib M]\n"
               "                  [--max-sessions N] [--max-tokens-per-step N] [--max-body-bytes N] [--http-threads N]\n"
               "                  [--shutdown-timeout S] [--tp N [--ep]] [--prefill-weights W] [--decode-weights W]\n"
               "                  [--activations exact|int8|bf16|fp8] [--weight-memory auto|mapped|huge-pages]\n"
               "                  [--enable-test-hooks] [--quiet]\n"
               "\n"
               "An OpenAI-compatible HTTP server over llmrt's C ABI: POST /v1/completions,\n"
               "POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics.\n"
               "  --port 0 picks a free port; the address is printed on stdout once listening.\n"
               "  --backend: auto (default: the GPU where one is present and the CUDA backend is built),\n"
               "    cpu, or cuda (fails to start without a device).\n"
               "  --kv-pressure: what a step does when KV pages run out: fail (503 + Retry-After),\n"
               "    queue (the request waits for pages), preempt (newer requests yield pages).\n"
               "  --max-sessions: concurrent generations (more get 429); default 64.\n"
               "  --prefill-weights / --decode-weights: the routed experts' storage per phase,\n"
               "    as-stored, int4-g32 or int4-g128 (quantized at load).\n"
               "  --activations int8: INT4 matmuls round activations to int8 (W4A8, faster).\n"
               "  --activations bf16: BF16 matmuls round activations to bf16 (bf16 dot products).\n"
               "  --activations fp8: FP8 block-weight matmuls round activations to e4m3 per 128\n"
               "    values (FP8 block-scaled GEMM); BF16 matmuls as under bf16.\n"
               "  --weight-memory: huge-pages copies the weights into 2 MiB pages at load (faster\n"
               "    decode); mapped reads them from the file mapping (no copy, shared page cache);\n"
               "    auto (default): huge pages where the kernel offers them.\n"
               "  --max-body-bytes: larger request bodies get 413; default 1048576.\n"
               "  --tp: in-process tensor-parallel ranks the model is split over (default 1); --ep\n"
               "        partitions the routed experts whole among them instead.\n"
               "  --enable-test-hooks: POST /debug/corrupt injects KV faults (llm_test_control).\n");
}

bool ParseInt(const std::string& s, long long lo, long long hi, long long* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int ParseArgs(int argc, char** argv, ServerOptions* out, bool* exit_now) {
  *exit_now = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      Usage(stdout);
      *exit_now = true;
      return 0;
    }
    if (a == "--enable-test-hooks") {
      out->enable_test_hooks = true;
      continue;
    }
    if (a == "--quiet") {
      out->quiet = true;
      continue;
    }
    if (a == "--ep") {  // a flag: takes no value
      out->expert_parallel = 1;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "llm-server: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    long long n = 0;
    auto int_arg = [&](long long lo, long long hi) {
      if (ParseInt(v, lo, hi, &n)) return true;
      std::fprintf(stderr, "llm-server: %s wants an integer in [%lld, %lld], got '%s'\n", a.c_str(), lo, hi,
                   v.c_str());
      return false;
    };
    if (a == "--model") {
      out->model_dir = v;
    } else if (a == "--served-model-name") {
      out->served_model_name = v;
    } else if (a == "--host") {
      out->host = v;
    } else if (a == "--port") {
      if (!int_arg(0, 65535)) return 2;
      out->port = static_cast<int>(n);
    } else if (a == "--threads") {
      if (!int_arg(0, 1024)) return 2;
      out->num_threads = static_cast<int32_t>(n);
    } else if (a == "--backend") {
      if (v == "auto") out->backend = LLM_BACKEND_AUTO;
      else if (v == "cpu") out->backend = LLM_BACKEND_CPU;
      else if (v == "cuda") out->backend = LLM_BACKEND_CUDA;
      else {
        std::fprintf(stderr, "llm-server: --backend wants auto, cpu or cuda, got '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "--kv-dtype") {
      if (v == "bf16") out->kv_dtype = LLM_KV_DTYPE_BF16;
      else if (v == "f32") out->kv_dtype = LLM_KV_DTYPE_F32;
      else if (v == "fp8") out->kv_dtype = LLM_KV_DTYPE_FP8_E4M3;
      else if (v == "fp8-tiled") out->kv_dtype = LLM_KV_DTYPE_FP8_E4M3_TILED;
      else {
        std::fprintf(stderr, "llm-server: --kv-dtype wants bf16, f32, fp8 or fp8-tiled, got '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "--kv-integrity") {
      if (v == "off") out->kv_integrity = LLM_KV_INTEGRITY_OFF;
      else if (v == "tags") out->kv_integrity = LLM_KV_INTEGRITY_TAGS;
      else {
        std::fprintf(stderr, "llm-server: --kv-integrity wants off or tags, got '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "--weight-memory") {
      if (v == "auto") out->weight_memory = LLM_WEIGHT_MEMORY_AUTO;
      else if (v == "mapped") out->weight_memory = LLM_WEIGHT_MEMORY_MAPPED;
      else if (v == "huge-pages") out->weight_memory = LLM_WEIGHT_MEMORY_HUGE_PAGES;
      else {
        std::fprintf(stderr, "llm-server: --weight-memory wants auto, mapped or huge-pages, got '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "--kv-pressure") {
      if (v == "fail") out->kv_pressure = LLM_KV_PRESSURE_FAIL;
      else if (v == "queue") out->kv_pressure = LLM_KV_PRESSURE_QUEUE;
      else if (v == "preempt") out->kv_pressure = LLM_KV_PRESSURE_PREEMPT;
      else {
        std::fprintf(stderr, "llm-server: --kv-pressure wants fail, queue or preempt, got '%s'\n", v.c_str());
        return 2;
      }
    } else if (a == "--kv-budget-mib") {
      // Fractional MiB are allowed so that tests can make a cache of a few pages.
      char* end = nullptr;
      errno = 0;
      const double mib = std::strtod(v.c_str(), &end);
      if (errno != 0 || *end != '\0' || !std::isfinite(mib) || mib <= 0 || mib > 1024.0 * 1024.0) {
        std::fprintf(stderr, "llm-server: --kv-budget-mib wants a number of MiB in (0, 1048576], got '%s'\n",
                     v.c_str());
        return 2;
      }
      out->kv_budget_bytes = static_cast<uint64_t>(mib * 1024.0 * 1024.0);
    } else if (a == "--max-sessions") {
      if (!int_arg(1, 4096)) return 2;
      out->max_sessions = static_cast<uint32_t>(n);
    } else if (a == "--max-tokens-per-step") {
      if (!int_arg(1, 1 << 20)) return 2;
      out->max_tokens_per_step = static_cast<uint32_t>(n);
    } else if (a == "--max-body-bytes") {
      if (!int_arg(1, 1LL << 32)) return 2;
      out->max_body_bytes = static_cast<uint64_t>(n);
    } else if (a == "--http-threads") {
      if (!int_arg(1, 8192)) return 2;
      out->http_threads = static_cast<int>(n);
    } else if (a == "--shutdown-timeout") {
      if (!int_arg(0, 86400)) return 2;
      out->shutdown_timeout_s = static_cast<int>(n);
    } else if (a == "--tp") {
      if (!int_arg(1, 1024)) return 2;
      out->tensor_parallel = static_cast<uint32_t>(n);
    } else if (a == "--prefill-weights" || a == "--decode-weights") {
      int32_t w;
      if (v == "as-stored") w = LLM_WEIGHTS_AS_STORED;
      else if (v == "int4-g32") w = LLM_WEIGHTS_INT4_G32;
      else if (v == "int4-g128") w = LLM_WEIGHTS_INT4_G128;
      else {
        std::fprintf(stderr, "llm-server: %s wants as-stored, int4-g32 or int4-g128, got '%s'\n", a.c_str(), v.c_str());
        return 2;
      }
      (a == "--prefill-weights" ? out->prefill_weights : out->decode_weights) = w;
    } else if (a == "--activations") {
      if (v == "exact") out->quantized_activations = LLM_ACTIVATIONS_EXACT;
      else if (v == "int8") out->quantized_activations = LLM_ACTIVATIONS_INT8;
      else if (v == "bf16") out->quantized_activations = LLM_ACTIVATIONS_BF16;
      else if (v == "fp8") out->quantized_activations = LLM_ACTIVATIONS_FP8;
      else {
        std::fprintf(stderr, "llm-server: --activations wants exact, int8, bf16 or fp8, got '%s'\n", v.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "llm-server: unknown argument %s\n", a.c_str());
      Usage(stderr);
      return 2;
    }
  }
  if (out->model_dir.empty()) {
    std::fprintf(stderr, "llm-server: --model DIR is required\n");
    Usage(stderr);
    return 2;
  }
  if (out->served_model_name.empty()) {
    std::string d = out->model_dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    const size_t slash = d.rfind('/');
    out->served_model_name = slash == std::string::npos ? d : d.substr(slash + 1);
  }
  if (out->http_threads == 0) {
    // Every generation holds its connection's thread while it streams, and clients keep idle
    // keep-alive connections (each also holding a thread until the keep-alive timeout): twice the
    // sessions, plus a few for /health and /metrics while every session is busy.
    out->http_threads = static_cast<int>(2 * out->max_sessions + 8);
  }
  return 0;
}

}  // namespace llm_server
