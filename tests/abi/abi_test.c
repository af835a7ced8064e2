/* The C ABI exercised from C, including only the public header: lifecycle, generation,
 * several sessions stepped together, and every error path a host can hit.
 * usage: llmrt_abi_test TEST_DATA_DIR SCRATCH_DIR */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llmrt/llmrt.h"

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(cond)                                                              \
  do {                                                                           \
    ++g_checks;                                                                  \
    if (!(cond)) {                                                               \
      ++g_failures;                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              llm_last_error());                                                 \
    }                                                                            \
  } while (0)

#define CHECK_STATUS(expr, want)                                                 \
  do {                                                                           \
    llm_status _s = (expr);                                                      \
    ++g_checks;                                                                  \
    if (_s != (want)) {                                                          \
      ++g_failures;                                                              \
      fprintf(stderr, "%s:%d: %s returned %s, want %s (last error: %s)\n", __FILE__, __LINE__, \
              #expr, llm_status_string(_s), llm_status_string(want), llm_last_error()); \
    }                                                                            \
  } while (0)

static const char* g_data;
static const char* g_tmp;
static char g_model[1024];

/* Golden prompts and greedy continuations of tiny_kimi_k2_qlora_yarn (F32 KV), from
 * tests/data/tiny_kimi_k2_qlora_yarn.golden.json. */
static const int32_t kPrompt0[] = {0, 17, 42, 99, 3, 250, 7};
static const int32_t kGen0[] = {178, 108, 252, 14, 31, 214, 39, 201, 165};
static const int32_t kPrompt1[] = {0, 5};
static const int32_t kGen1[] = {132, 48, 151, 9, 170, 158, 21, 170, 128};

static char* ReadFile(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  char* buf;
  long n;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = (char*)malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    fclose(f);
    return NULL;
  }
  buf[n] = 0;
  fclose(f);
  *size = (size_t)n;
  return buf;
}

static void WriteFile(const char* path, const char* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
  fwrite(data, 1, size, f);
  fclose(f);
}

/* Makes SCRATCH/name holding the tiny model's config (possibly replaced) and weights
 * (possibly altered by `mutate`). Returns the directory path (static buffer). */
static const char* MakeModelDir(const char* name, const char* config_override,
                                void (*mutate)(char* data, size_t* size)) {
  static char dir[1024];
  char src[1200], dst[1200];
  char* data;
  size_t size = 0;
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
  mkdir(g_tmp, 0755);
  mkdir(dir, 0755);
  snprintf(src, sizeof src, "%s/config.json", g_model);
  snprintf(dst, sizeof dst, "%s/config.json", dir);
  if (config_override) {
    WriteFile(dst, config_override, strlen(config_override));
  } else {
    data = ReadFile(src, &size);
    WriteFile(dst, data, size);
    free(data);
  }
  snprintf(src, sizeof src, "%s/model.safetensors", g_model);
  snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
  data = ReadFile(src, &size);
  if (mutate) mutate(data, &size);
  WriteFile(dst, data, size);
  free(data);
  return dir;
}

static void Truncate(char* data, size_t* size) {
  (void)data;
  *size = *size / 2;
}
static void Garbage(char* data, size_t* size) {
  memset(data, 0x7b, 64); /* '{' bytes: a header length of ~8.9e15 */
  (void)size;
}
static void SwapShape(char* data, size_t* size) {
  /* [256,64] -> [64,256]: same byte count, so the file is valid but a tensor has the wrong shape. */
  char* p;
  size_t hdr = (size_t)(unsigned char)data[0] | ((size_t)(unsigned char)data[1] << 8) |
               ((size_t)(unsigned char)data[2] << 16);
  char saved = data[8 + hdr];
  (void)size;
  data[8 + hdr] = 0;
  p = strstr(data + 8, "[256,64]");
  data[8 + hdr] = saved;
  if (p) memcpy(p, "[64,256]", 8);
}

static llm_runtime* OpenRuntime(int32_t kv_dtype, uint64_t kv_budget, uint32_t max_sessions) {
  llm_runtime_options o;
  llm_runtime* rt = NULL;
  llm_runtime_options_init(&o);
  o.kv_dtype = kv_dtype;
  o.kv_budget_bytes = kv_budget;
  o.max_sessions = max_sessions;
  CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_OK);
  return rt;
}

static void TestVersionAndStatus(void) {
  CHECK(strcmp(llm_version(), LLMRT_VERSION_STRING) == 0);
  CHECK(llm_version_number() == LLMRT_VERSION_MAJOR * 1000000u + LLMRT_VERSION_MINOR * 1000u + LLMRT_VERSION_PATCH);
  CHECK(strcmp(llm_status_string(LLM_OK), "LLM_OK") == 0);
  CHECK(strcmp(llm_status_string(LLM_ERR_KV_EXHAUSTED), "LLM_ERR_KV_EXHAUSTED") == 0);
  CHECK(strcmp(llm_status_string(9999), "LLM_ERR_UNKNOWN_STATUS") == 0);
}

static void TestNullArguments(void) {
  llm_runtime* rt = (llm_runtime*)0x1;
  llm_session* s = (llm_session*)0x1;
  llm_runtime_info info;
  size_t n = 7;
  float f;
  int32_t tok = 1;
  CHECK_STATUS(llm_runtime_create(g_model, NULL, NULL), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_runtime_create(NULL, NULL, &rt), LLM_ERR_INVALID_ARGUMENT);
  CHECK(rt == NULL);
  CHECK(strstr(llm_last_error(), "model_dir") != NULL);
  info.struct_size = sizeof info;
  CHECK_STATUS(llm_runtime_get_info(NULL, &info), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_session_create(NULL, NULL, &s), LLM_ERR_INVALID_ARGUMENT);
  CHECK(s == NULL);
  CHECK_STATUS(llm_session_append_tokens(NULL, &tok, 1), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_session_cancel(NULL), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_session_get_logits(NULL, &f, 1, &n), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_decode_step(NULL, NULL, 0, &n), LLM_ERR_INVALID_ARGUMENT);
  CHECK(n == 0);
  CHECK_STATUS(llm_decode_step(NULL, NULL, 0, NULL), LLM_ERR_INVALID_ARGUMENT);
  llm_runtime_destroy(NULL);
  llm_session_destroy(NULL);
  llm_runtime_options_init(NULL);
  llm_sampling_options_init(NULL);
}

/* llm_runtime_create_synthetic from C: argument checks, and a runtime over the tiny model's
 * config.json that decodes with the real checkpoint's parameter count. */
static void TestSyntheticFromC(void) {
  llm_runtime* rt = (llm_runtime*)0x1;
  llm_runtime* real = NULL;
  llm_session* s = NULL;
  llm_runtime_info info, real_info;
  llm_sampling_options so;
  llm_step_result r;
  size_t n = 0;
  int tokens = 0, i;
  CHECK_STATUS(llm_runtime_create_synthetic(NULL, 1, NULL, &rt), LLM_ERR_INVALID_ARGUMENT);
  CHECK(rt == NULL);
  CHECK(strstr(llm_last_error(), "config_dir") != NULL);
  CHECK_STATUS(llm_runtime_create_synthetic(g_model, 1, NULL, NULL), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_runtime_create_synthetic(g_model, 1, NULL, &rt), LLM_OK);
  if (rt == NULL) return;
  info.struct_size = sizeof info;
  real_info.struct_size = sizeof real_info;
  CHECK_STATUS(llm_runtime_get_info(rt, &info), LLM_OK);
  CHECK_STATUS(llm_runtime_create(g_model, NULL, &real), LLM_OK);
  if (real != NULL) {
    CHECK_STATUS(llm_runtime_get_info(real, &real_info), LLM_OK);
    CHECK(info.num_parameters == real_info.num_parameters);
    llm_runtime_destroy(real);
  }
  llm_sampling_options_init(&so);
  so.max_new_tokens = 3;
  CHECK_STATUS(llm_session_create(rt, &so, &s), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(s, kPrompt1, 2), LLM_OK);
  for (i = 0; i < 16 && tokens < 3; ++i) {
    if (llm_decode_step(rt, &r, 1, &n) != LLM_OK || n != 1) break;
    if (r.token != LLM_TOKEN_NONE) {
      CHECK(r.token >= 0 && (uint32_t)r.token < info.vocab_size);
      ++tokens;
    }
  }
  CHECK(tokens == 3);
  llm_session_destroy(s);
  llm_runtime_destroy(rt);
}

static void TestBadCheckpoints(void) {
  llm_runtime* rt = (llm_runtime*)0x1;
  char path[1200];
  const char* dir;
  snprintf(path, sizeof path, "%s/no_such_model", g_tmp);
  CHECK_STATUS(llm_runtime_create(path, NULL, &rt), LLM_ERR_NOT_FOUND);
  CHECK(rt == NULL);

  dir = MakeModelDir("truncated", NULL, Truncate);
  CHECK_STATUS(llm_runtime_create(dir, NULL, &rt), LLM_ERR_FORMAT);
  CHECK(strstr(llm_last_error(), "model.safetensors") != NULL);

  dir = MakeModelDir("garbage", NULL, Garbage);
  CHECK_STATUS(llm_runtime_create(dir, NULL, &rt), LLM_ERR_FORMAT);

  dir = MakeModelDir("wrong_shape", NULL, SwapShape);
  CHECK_STATUS(llm_runtime_create(dir, NULL, &rt), LLM_ERR_FORMAT);
  CHECK(strstr(llm_last_error(), "shape") != NULL);

  dir = MakeModelDir("unknown_arch", "{\"architectures\": [\"MysteryForCausalLM\"], \"hidden_size\": 8}", NULL);
  CHECK_STATUS(llm_runtime_create(dir, NULL, &rt), LLM_ERR_UNSUPPORTED);
  CHECK(strstr(llm_last_error(), "MysteryForCausalLM") != NULL);

  dir = MakeModelDir("bad_json", "{\"architectures\": [", NULL);
  CHECK_STATUS(llm_runtime_create(dir, NULL, &rt), LLM_ERR_FORMAT);
  CHECK(rt == NULL);
}

static void TestBadOptions(void) {
  llm_runtime_options o;
  llm_runtime* rt = NULL;
  llm_runtime_options_init(&o);
  o.kv_dtype = 77;
  CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_ERR_INVALID_ARGUMENT);
  llm_runtime_options_init(&o);
  o.kv_budget_bytes = 100; /* smaller than one page */
  CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_ERR_INVALID_ARGUMENT);
  llm_runtime_options_init(&o);
  o.struct_size = 0;
  CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_ERR_INVALID_ARGUMENT);
  /* An older, smaller options struct: only struct_size and backend. */
  llm_runtime_options_init(&o);
  o.struct_size = offsetof(llm_runtime_options, num_threads);
  o.kv_dtype = 77; /* beyond the old struct: must be ignored */
  CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_OK);
  llm_runtime_destroy(rt);
}

/* The activation policies through the C ABI: EXACT, INT8, BF16 and FP8 are accepted on the CPU
 * backend (BF16 runs this BF16 model's matmuls on bf16 dot products, FP8 treats them as BF16 does;
 * each still generates), anything else is INVALID_ARGUMENT naming the field. */
static void TestActivationPolicies(void) {
  const int32_t good[4] = {LLM_ACTIVATIONS_EXACT, LLM_ACTIVATIONS_INT8, LLM_ACTIVATIONS_BF16,
                           LLM_ACTIVATIONS_FP8};
  const int32_t bad[3] = {-1, 4, 1000};
  llm_runtime_options o;
  llm_runtime* rt = NULL;
  int i;
  for (i = 0; i < 4; ++i) {
    llm_sampling_options so;
    llm_session* s = NULL;
    llm_step_result r[1];
    size_t got = 0;
    int steps = 0, tokens = 0, finished = 0;
    llm_runtime_options_init(&o);
    o.backend = LLM_BACKEND_CPU;
    o.quantized_activations = good[i];
    rt = NULL;
    CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_OK);
    if (rt == NULL) continue;
    llm_sampling_options_init(&so);
    so.max_new_tokens = 4;
    CHECK_STATUS(llm_session_create(rt, &so, &s), LLM_OK);
    CHECK_STATUS(llm_session_append_tokens(s, kPrompt0, 7), LLM_OK);
    for (steps = 0; steps < 20 && !finished; ++steps) {
      CHECK_STATUS(llm_decode_step(rt, r, 1, &got), LLM_OK);
      if (got == 1) {
        CHECK(r[0].status == LLM_OK);
        if (r[0].token != LLM_TOKEN_NONE) ++tokens;
        finished = r[0].finish_reason != LLM_FINISH_NONE;
      }
    }
    CHECK(finished && tokens == 4);
    llm_session_destroy(s);
    llm_runtime_destroy(rt);
  }
  for (i = 0; i < 3; ++i) {
    llm_runtime_options_init(&o);
    o.quantized_activations = bad[i];
    rt = NULL;
    CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_ERR_INVALID_ARGUMENT);
    CHECK(rt == NULL);
    CHECK(strstr(llm_last_error(), "quantized_activations") != NULL);
  }
}

/* Steps until every listed session finished; records generated tokens per session. */
static void RunToEnd(llm_runtime* rt, llm_session** sessions, int n, int32_t out[][16], int* counts) {
  llm_step_result results[8];
  int done = 0, iter, i;
  size_t k, got;
  for (i = 0; i < n; ++i) counts[i] = 0;
  for (iter = 0; iter < 1000 && done < n; ++iter) {
    CHECK_STATUS(llm_decode_step(rt, results, 8, &got), LLM_OK);
    if (got == 0) break;
    for (k = 0; k < got; ++k) {
      for (i = 0; i < n; ++i) {
        if (results[k].session != sessions[i]) continue;
        CHECK(results[k].status == LLM_OK);
        if (results[k].token != LLM_TOKEN_NONE && counts[i] < 16) out[i][counts[i]++] = results[k].token;
        if (results[k].finish_reason != LLM_FINISH_NONE) ++done;
      }
    }
  }
}

static void TestGenerationLifecycle(void) {
  llm_runtime* rt = OpenRuntime(LLM_KV_DTYPE_F32, 0, 0);
  llm_runtime_info info;
  llm_sampling_options so;
  llm_session* s[3] = {NULL, NULL, NULL};
  llm_session_info si;
  int32_t out[3][16];
  int counts[3];
  int i;
  float logits[256];
  size_t n = 0;
  if (!rt) return;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_STATUS(llm_runtime_get_info(rt, &info), LLM_OK);
  CHECK(strcmp(info.architecture, "DeepseekV3ForCausalLM") == 0);
  CHECK(strcmp(info.model_type, "kimi_k2") == 0);
  CHECK(info.vocab_size == 256);
  CHECK(info.num_layers == 3);
  CHECK(info.kv_bytes_per_token == 3 * (32 + 16) * 4); /* layers * (kv_lora + rope) * sizeof(float) */
  CHECK(info.kv_capacity_tokens == (uint64_t)info.pages_total * info.page_size_tokens);
  CHECK(info.pages_free == info.pages_total);
  CHECK(info.num_parameters > 200000 && info.weight_bytes == info.num_parameters * 2);

  llm_sampling_options_init(&so);
  so.max_new_tokens = 9;
  for (i = 0; i < 3; ++i) CHECK_STATUS(llm_session_create(rt, &so, &s[i]), LLM_OK);
  CHECK_STATUS(llm_session_get_logits(s[0], logits, 256, &n), LLM_ERR_INVALID_STATE);
  CHECK_STATUS(llm_session_append_tokens(s[0], kPrompt0, 7), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(s[1], kPrompt1, 2), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(s[2], kPrompt0, 7), LLM_OK);
  {
    int32_t bad[2] = {3, 256};
    int32_t neg = -1;
    CHECK_STATUS(llm_session_append_tokens(s[2], bad, 2), LLM_ERR_INVALID_ARGUMENT);
    CHECK(strstr(llm_last_error(), "256") != NULL);
    CHECK_STATUS(llm_session_append_tokens(s[2], &neg, 1), LLM_ERR_INVALID_ARGUMENT);
  }
  si.struct_size = sizeof si;
  CHECK_STATUS(llm_session_get_info(s[2], &si), LLM_OK);
  CHECK(si.state == LLM_SESSION_PREFILL && si.num_pending == 7); /* the bad appends added nothing */
  {
    size_t need = 0;
    llm_step_result one;
    CHECK_STATUS(llm_decode_step(rt, &one, 1, &need), LLM_ERR_BUFFER_TOO_SMALL);
    CHECK(need == 3);
  }
  RunToEnd(rt, s, 3, out, counts);
  CHECK(counts[0] == 9 && memcmp(out[0], kGen0, sizeof kGen0) == 0);
  CHECK(counts[1] == 9 && memcmp(out[1], kGen1, sizeof kGen1) == 0);
  CHECK(counts[2] == 9 && memcmp(out[2], kGen0, sizeof kGen0) == 0);
  CHECK_STATUS(llm_session_get_logits(s[0], logits, 10, &n), LLM_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 256);
  CHECK_STATUS(llm_session_get_logits(s[0], logits, 256, &n), LLM_OK);
  for (i = 1; i < 256; ++i) CHECK(logits[i] <= logits[kGen0[8]]);
  CHECK_STATUS(llm_session_get_info(s[0], &si), LLM_OK);
  CHECK(si.state == LLM_SESSION_FINISHED && si.num_generated == 9 && si.num_tokens == 7 + 8);

  /* A second turn: the last generated token is kept, then the new tokens. */
  CHECK_STATUS(llm_session_append_tokens(s[1], kPrompt1, 2), LLM_OK);
  CHECK_STATUS(llm_session_get_info(s[1], &si), LLM_OK);
  CHECK(si.num_pending == 3 && si.state == LLM_SESSION_PREFILL);
  for (i = 0; i < 3; ++i) llm_session_destroy(s[i]);
  CHECK_STATUS(llm_runtime_get_info(rt, &info), LLM_OK);
  CHECK(info.pages_free == info.pages_total && info.num_sessions == 0);
  llm_runtime_destroy(rt);
}

static void TestStopTokensAndCancel(void) {
  llm_runtime* rt = OpenRuntime(LLM_KV_DTYPE_F32, 0, 0);
  llm_sampling_options so;
  llm_session *a = NULL, *b = NULL;
  llm_step_result r[4];
  size_t n = 0;
  int32_t stop = 252;
  int steps;
  int saw_stop = 0, saw_cancel = 0;
  if (!rt) return;
  llm_sampling_options_init(&so);
  so.stop_tokens = &stop;
  so.num_stop_tokens = 1;
  CHECK_STATUS(llm_session_create(rt, &so, &a), LLM_OK);
  llm_sampling_options_init(&so);
  CHECK_STATUS(llm_session_create(rt, &so, &b), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(a, kPrompt0, 7), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(b, kPrompt1, 2), LLM_OK);
  for (steps = 0; steps < 3; ++steps) {
    size_t k;
    CHECK_STATUS(llm_decode_step(rt, r, 4, &n), LLM_OK);
    for (k = 0; k < n; ++k) {
      if (r[k].session == a && r[k].finish_reason == LLM_FINISH_STOP) {
        saw_stop = 1;
        CHECK(r[k].token == 252 && steps == 2);
      }
    }
  }
  CHECK(saw_stop);
  CHECK_STATUS(llm_session_cancel(b), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(b, kPrompt1, 2), LLM_ERR_INVALID_STATE);
  CHECK_STATUS(llm_decode_step(rt, r, 4, &n), LLM_OK);
  {
    size_t k;
    for (k = 0; k < n; ++k) {
      if (r[k].session == b) {
        saw_cancel = 1;
        CHECK(r[k].finish_reason == LLM_FINISH_CANCELLED && r[k].status == LLM_ERR_CANCELLED);
      }
    }
  }
  CHECK(saw_cancel);
  CHECK_STATUS(llm_decode_step(rt, r, 4, &n), LLM_OK);
  CHECK(n == 0); /* nothing left to run, the cancellation was reported once */
  llm_session_destroy(a);
  llm_session_destroy(b);
  llm_runtime_destroy(rt);
}

static void TestKvExhaustionIsolatesTheSession(void) {
  /* F32 KV: one 16-token page is 16 * 576 bytes; two pages fit. The 40-token prompt needs three. */
  const uint64_t page_bytes = 16u * 3u * 48u * 4u;
  llm_runtime* rt = OpenRuntime(LLM_KV_DTYPE_F32, 2 * page_bytes, 0);
  llm_sampling_options so;
  llm_session *big = NULL, *small = NULL;
  llm_session* both[1];
  llm_step_result r[4];
  int32_t prompt[41];
  int32_t out[1][16];
  int counts[1];
  size_t n = 0, k;
  int i, saw_exhausted = 0, small_advanced = 0;
  if (!rt) return;
  prompt[0] = 0;
  for (i = 0; i < 40; ++i) prompt[i + 1] = (i * 37 + 11) % 256;
  llm_sampling_options_init(&so);
  so.max_new_tokens = 9;
  CHECK_STATUS(llm_session_create(rt, &so, &big), LLM_OK);
  CHECK_STATUS(llm_session_create(rt, &so, &small), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(big, prompt, 41), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(small, kPrompt0, 7), LLM_OK);
  CHECK_STATUS(llm_decode_step(rt, r, 4, &n), LLM_OK);
  for (k = 0; k < n; ++k) {
    if (r[k].session == big) {
      saw_exhausted = r[k].status == LLM_ERR_KV_EXHAUSTED && r[k].token == LLM_TOKEN_NONE;
    }
    if (r[k].session == small) small_advanced = r[k].status == LLM_OK && r[k].token == kGen0[0];
  }
  CHECK(saw_exhausted);
  CHECK(small_advanced);
  {
    llm_session_info si;
    si.struct_size = sizeof si;
    CHECK_STATUS(llm_session_get_info(big, &si), LLM_OK);
    CHECK(si.num_tokens == 0 && si.num_pending == 41 && si.num_pages == 0); /* untouched */
  }
  llm_session_destroy(big);
  both[0] = small;
  RunToEnd(rt, both, 1, out, counts);
  CHECK(counts[0] == 8 && memcmp(out[0], kGen0 + 1, 8 * sizeof(int32_t)) == 0);
  llm_session_destroy(small);
  llm_runtime_destroy(rt);
}

static void TestSessionLimit(void) {
  llm_runtime* rt = OpenRuntime(LLM_KV_DTYPE_BF16, 0, 2);
  llm_session *a = NULL, *b = NULL, *c = (llm_session*)0x1;
  if (!rt) return;
  CHECK_STATUS(llm_session_create(rt, NULL, &a), LLM_OK);
  CHECK_STATUS(llm_session_create(rt, NULL, &b), LLM_OK);
  CHECK_STATUS(llm_session_create(rt, NULL, &c), LLM_ERR_OUT_OF_RANGE);
  CHECK(c == NULL);
  llm_session_destroy(a);
  CHECK_STATUS(llm_session_create(rt, NULL, &c), LLM_OK);
  llm_session_destroy(b);
  llm_session_destroy(c);
  llm_runtime_destroy(rt);
}

/* ---- KV integrity from C: a tracker, a veto, and an injected fault ---- */
typedef struct {
  int allocs, frees, verifies, violations, destroyed;
  uint64_t veto;
} TrackerState;

static void OnAlloc(void* u, uint64_t s, uint32_t p, uint64_t t) {
  (void)s, (void)p, (void)t;
  ((TrackerState*)u)->allocs++;
}
static void OnFree(void* u, uint64_t s, uint32_t p, uint64_t t) {
  (void)s, (void)p, (void)t;
  ((TrackerState*)u)->frees++;
}
static int32_t OnVerify(void* u, uint64_t s, const uint32_t* p, const uint64_t* t, size_t n) {
  TrackerState* st = (TrackerState*)u;
  (void)p, (void)t, (void)n;
  st->verifies++;
  return s == st->veto ? 1 : 0;
}
static void OnViolation(void* u, uint64_t s, uint32_t e, uint32_t p, uint64_t want, uint64_t got) {
  (void)s, (void)e, (void)p;
  CHECK(want != got);
  ((TrackerState*)u)->violations++;
}
static void OnDestroy(void* u) { ((TrackerState*)u)->destroyed++; }

static void TestIntegrityFromC(void) {
  TrackerState st;
  llm_kv_tracker tr;
  llm_runtime_options o;
  llm_runtime* rt = NULL;
  llm_session *a = NULL, *b = NULL;
  llm_session_info ai;
  llm_step_result r[4];
  size_t n = 0, k;
  int64_t args[2];
  int a_failed = 0, b_tokens = 0, step;
  memset(&st, 0, sizeof st);
  memset(&tr, 0, sizeof tr);
  tr.struct_size = sizeof tr;
  tr.user_data = &st;
  tr.on_alloc = OnAlloc;
  tr.on_free = OnFree;
  tr.on_verify = OnVerify;
  tr.on_violation = OnViolation;
  tr.destroy = OnDestroy;
  llm_runtime_options_init(&o);
  o.kv_dtype = LLM_KV_DTYPE_F32;
  o.page_size_tokens = 4;
  o.tracker = &tr;
  CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_OK);
  if (!rt) return;
  CHECK_STATUS(llm_session_create(rt, NULL, &a), LLM_OK);
  CHECK_STATUS(llm_session_create(rt, NULL, &b), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(a, kPrompt0, 7), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(b, kPrompt1, 2), LLM_OK);
  CHECK_STATUS(llm_decode_step(rt, r, 4, &n), LLM_OK);
  ai.struct_size = sizeof ai;
  CHECK_STATUS(llm_session_get_info(a, &ai), LLM_OK);
  args[0] = (int64_t)ai.id;
  args[1] = 0;
  CHECK_STATUS(llm_test_control(rt, LLM_TESTCTL_KV_FREE_MAPPED_PAGE, args, 2), LLM_OK);
  CHECK_STATUS(llm_test_control(rt, 999, args, 2), LLM_ERR_INVALID_ARGUMENT);
  args[0] = 12345;
  CHECK_STATUS(llm_test_control(rt, LLM_TESTCTL_KV_FREE_MAPPED_PAGE, args, 2), LLM_ERR_INVALID_ARGUMENT);
  for (step = 0; step < 4; ++step) {
    CHECK_STATUS(llm_decode_step(rt, r, 4, &n), LLM_OK);
    for (k = 0; k < n; ++k) {
      if (r[k].session == a && r[k].status == LLM_ERR_KV_INTEGRITY) {
        a_failed = 1;
        CHECK(r[k].finish_reason == LLM_FINISH_ERROR && r[k].num_failed_pages == 1 && r[k].failed_page >= 0);
        CHECK(r[k].token == LLM_TOKEN_NONE);
      }
      if (r[k].session == b && r[k].status == LLM_OK && r[k].token != LLM_TOKEN_NONE) {
        CHECK(r[k].token == kGen1[1 + b_tokens]);
        ++b_tokens;
      }
    }
  }
  CHECK(a_failed);
  CHECK(b_tokens == 4);
  CHECK(st.violations == 1 && st.allocs > 0 && st.verifies > 0);
  CHECK_STATUS(llm_session_append_tokens(a, kPrompt1, 2), LLM_ERR_INVALID_STATE);
  llm_session_destroy(a);
  llm_session_destroy(b);
  CHECK(st.destroyed == 0);
  llm_runtime_destroy(rt);
  CHECK(st.destroyed == 1 && st.frees > 0);
}

/* ---- tokenizers from C ---- */
static void TestTokenizerFromC(void) {
  char dir[1200];
  llm_tokenizer* tok = NULL;
  llm_tokenizer_info ti;
  llm_detokenizer* d = NULL;
  int32_t ids[64];
  size_t n = 0, len = 0, i;
  char text[256], out[256];
  int32_t id = 0;
  const char* sentence = "In the beginning God created the heaven and the earth.";
  llm_chat_message msgs[2];
  snprintf(dir, sizeof dir, "%s/tokenizers/kimi", g_data);
  CHECK_STATUS(llm_tokenizer_create(dir, &tok), LLM_OK);
  if (!tok) return;
  ti.struct_size = sizeof ti;
  CHECK_STATUS(llm_tokenizer_get_info(tok, &ti), LLM_OK);
  CHECK(ti.family == LLM_TOKENIZER_KIMI && ti.vocab_size == 4096 && ti.bos_id == 3840 && ti.eos_id == 3841);
  CHECK_STATUS(llm_tokenize(tok, sentence, strlen(sentence), 0, ids, 2, &n), LLM_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 11);
  CHECK_STATUS(llm_tokenize(tok, sentence, strlen(sentence), 0, ids, 64, &n), LLM_OK);
  CHECK(n == 11 && ids[0] == 1143 && ids[10] == 46); /* as tiktoken encodes it */
  CHECK_STATUS(llm_detokenize(tok, ids, n, 0, text, 10, &len), LLM_ERR_BUFFER_TOO_SMALL);
  CHECK(len == strlen(sentence));
  CHECK_STATUS(llm_detokenize(tok, ids, n, 0, text, sizeof text, &len), LLM_OK);
  CHECK(strcmp(text, sentence) == 0);
  CHECK_STATUS(llm_tokenizer_special_id(tok, "<|im_end|>", &id), LLM_OK);
  CHECK(id == 3842);
  CHECK_STATUS(llm_tokenizer_special_id(tok, "<|nope|>", &id), LLM_ERR_NOT_FOUND);
  /* Streaming: the concatenation of the pushes is the whole text. */
  CHECK_STATUS(llm_detokenizer_create(tok, 1, &d), LLM_OK);
  out[0] = 0;
  for (i = 0; i < n; ++i) {
    CHECK_STATUS(llm_detokenizer_push(d, ids[i], text, sizeof text, &len), LLM_OK);
    strncat(out, text, sizeof out - strlen(out) - 1);
  }
  CHECK_STATUS(llm_detokenizer_flush(d, text, sizeof text, &len), LLM_OK);
  CHECK(len == 0 && strcmp(out, sentence) == 0);
  CHECK_STATUS(llm_detokenizer_push(d, 99999, text, sizeof text, &len), LLM_ERR_INVALID_ARGUMENT);
  llm_detokenizer_destroy(d);
  msgs[0].role = "user";
  msgs[0].content = "Hi";
  msgs[1].role = NULL;
  msgs[1].content = "x";
  CHECK_STATUS(llm_chat_apply_template(tok, msgs, 1, 1, 0, text, sizeof text, &len), LLM_OK);
  CHECK(strcmp(text, "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|>") == 0);
  CHECK_STATUS(llm_chat_apply_template(tok, msgs, 2, 1, 0, text, sizeof text, &len), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_tokenize(NULL, "a", 1, 0, ids, 64, &n), LLM_ERR_INVALID_ARGUMENT);
  llm_tokenizer_destroy(tok);
  llm_tokenizer_destroy(NULL);
  CHECK_STATUS(llm_tokenizer_create(g_model, &tok), LLM_ERR_NOT_FOUND); /* no tokenizer files there */
  CHECK(tok == NULL);
}

/* ---- scoring ---- */
static void TestScoreFromC(void) {
  llm_runtime* rt = OpenRuntime(LLM_KV_DTYPE_F32, 0, 0);
  float lp[8];
  int32_t am[8];
  int32_t seq[8];
  int i;
  if (!rt) return;
  /* The greedy continuation of prompt 0: every scored position's argmax is the next token. */
  for (i = 0; i < 7; ++i) seq[i] = kPrompt0[i];
  seq[7] = kGen0[0];
  CHECK_STATUS(llm_score(rt, seq, 8, lp, am), LLM_OK);
  CHECK(am[6] == kGen0[0]);
  for (i = 0; i < 7; ++i) CHECK(lp[i] <= 0.0f);
  seq[3] = 999;
  CHECK_STATUS(llm_score(rt, seq, 8, lp, am), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_score(rt, seq, 1, lp, am), LLM_ERR_INVALID_ARGUMENT);
  llm_runtime_destroy(rt);
}

/* KV bytes per token of the released models, from their config.json alone (tests/data/configs). */
static void TestKvSizingFromC(void) {
  char dir[1200];
  llm_kv_sizing k;
  const uint64_t gib = 1ull << 30;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  snprintf(dir, sizeof dir, "%s/configs/kimi-k2", g_data);
  /* Kimi K2: 61 layers x (512 + 64) values. */
  CHECK_STATUS(llm_model_kv_sizing(dir, LLM_KV_DTYPE_BF16, gib, 0, 4096, &k), LLM_OK);
  CHECK(k.struct_size == sizeof k && k.kv_dtype == LLM_KV_DTYPE_BF16 && k.num_layers == 61);
  CHECK(k.elements_per_token_layer == 576);
  CHECK(k.bytes_per_token == 70272);
  CHECK(k.capacity_tokens == gib / (70272u * 16u) * 16u);
  CHECK(k.max_sessions == gib / (70272u * 16u) / 256u);
  {
    const uint64_t bf16_tokens = k.capacity_tokens;
    CHECK_STATUS(llm_model_kv_sizing(dir, LLM_KV_DTYPE_FP8_E4M3, gib, 0, 0, &k), LLM_OK);
    CHECK(k.bytes_per_token == 35136);
    CHECK(k.capacity_tokens >= 2 * bf16_tokens && k.capacity_tokens <= 2 * bf16_tokens + 16);
    CHECK(k.max_sessions == 0);
  }
  /* GLM-5: 78 layers x (512 + 64 + 128 indexer key). */
  snprintf(dir, sizeof dir, "%s/configs/glm-5", g_data);
  CHECK_STATUS(llm_model_kv_sizing(dir, LLM_KV_DTYPE_AUTO, gib, 64, 0, &k), LLM_OK);
  CHECK(k.kv_dtype == LLM_KV_DTYPE_BF16 && k.elements_per_token_layer == 704 && k.bytes_per_token == 109824);
  /* GLM-4.5: 92 layers x 2 x 8 KV heads x 128. */
  snprintf(dir, sizeof dir, "%s/configs/glm-4.5", g_data);
  CHECK_STATUS(llm_model_kv_sizing(dir, LLM_KV_DTYPE_F32, gib, 16, 0, &k), LLM_OK);
  CHECK(k.bytes_per_token == 2 * 376832);
  /* Errors. */
  CHECK_STATUS(llm_model_kv_sizing(NULL, LLM_KV_DTYPE_BF16, gib, 0, 0, &k), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_model_kv_sizing(dir, LLM_KV_DTYPE_BF16, gib, 0, 0, NULL), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_model_kv_sizing(dir, 77, gib, 0, 0, &k), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_model_kv_sizing(dir, LLM_KV_DTYPE_BF16, gib, 5000, 0, &k), LLM_ERR_INVALID_ARGUMENT);
  snprintf(dir, sizeof dir, "%s/no-such-model", g_data);
  CHECK_STATUS(llm_model_kv_sizing(dir, LLM_KV_DTYPE_BF16, gib, 0, 0, &k), LLM_ERR_NOT_FOUND);
  k.struct_size = 0;
  CHECK_STATUS(llm_model_kv_sizing(g_model, LLM_KV_DTYPE_BF16, gib, 0, 0, &k), LLM_ERR_INVALID_ARGUMENT);
}

typedef struct {
  int lines;
  llm_log_level last_level;
} LogState;

static void OnLog(void* user, llm_log_level level, const char* message) {
  LogState* st = (LogState*)user;
  st->lines++;
  st->last_level = level;
  CHECK(message != NULL && message[0] != '\0');
}

static void TestLogCallback(void) {
  LogState st;
  llm_runtime* rt;
  memset(&st, 0, sizeof st);
  CHECK_STATUS(llm_set_log_callback(OnLog, &st, -1), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_set_log_callback(OnLog, &st, LLM_LOG_OFF + 1), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_set_log_callback(OnLog, &st, LLM_LOG_DEBUG), LLM_OK);
  rt = OpenRuntime(LLM_KV_DTYPE_F32, 0, 0); /* the tiny model logs nothing at load */
  llm_runtime_destroy(rt);
  CHECK(st.lines == 0);
  CHECK_STATUS(llm_set_log_callback(NULL, NULL, LLM_LOG_INFO), LLM_OK);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s TEST_DATA_DIR SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  g_data = argv[1];
  g_tmp = argv[2];
  snprintf(g_model, sizeof g_model, "%s/tiny_kimi_k2_qlora_yarn", g_data);
  TestVersionAndStatus();
  TestNullArguments();
  TestSyntheticFromC();
  TestBadCheckpoints();
  TestBadOptions();
  TestActivationPolicies();
  TestGenerationLifecycle();
  TestStopTokensAndCancel();
  TestKvExhaustionIsolatesTheSession();
  TestSessionLimit();
  TestIntegrityFromC();
  TestTokenizerFromC();
  TestScoreFromC();
  TestKvSizingFromC();
  TestLogCallback();
  printf("%d passed, %d failed\n", g_checks - g_failures, g_failures);
  return g_failures == 0 ? 0 : 1;
}
