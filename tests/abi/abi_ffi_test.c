/* The parts of the C ABI made for foreign-function hosts, from C: errors delivered by handle and
 * read on another thread than the failed call's, the error-out creation functions, the log
 * callback's destroy hook, and llm_decode_step_v2's caller-sized results.
 * usage: llmrt_abi_ffi_test TEST_DATA_DIR */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmrt/llmrt.h"

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(cond)                                                                \
  do {                                                                             \
    ++g_checks;                                                                    \
    if (!(cond)) {                                                                 \
      ++g_failures;                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
    }                                                                              \
  } while (0)

#define CHECK_STATUS(expr, want)                                                   \
  do {                                                                             \
    llm_status _s = (expr);                                                        \
    ++g_checks;                                                                    \
    if (_s != (want)) {                                                            \
      ++g_failures;                                                                \
      fprintf(stderr, "%s:%d: %s returned %s, want %s (last error: %s)\n", __FILE__, __LINE__, \
              #expr, llm_status_string(_s), llm_status_string(want), llm_last_error()); \
    }                                                                              \
  } while (0)

static char g_model[1024];
static char g_tokenizer_dir[1024];

/* Golden greedy continuation of tiny_kimi_k2_qlora_yarn (tests/data/...golden.json). */
static const int32_t kPrompt[] = {0, 17, 42, 99, 3, 250, 7};
static const int32_t kGen[] = {178, 108, 252, 14, 31, 214, 39, 201, 165};

static llm_error EmptyError(void) {
  llm_error e;
  memset(&e, 0x5A, sizeof e); /* garbage the library must overwrite */
  e.struct_size = sizeof e;
  return e;
}

static int MessageIsTerminated(const llm_error* e) {
  return memchr(e->message, '\0', sizeof e->message) != NULL;
}

static void TestCreateV2(void) {
  llm_runtime* rt = (llm_runtime*)0x1;
  llm_tokenizer* tok = (llm_tokenizer*)0x1;
  llm_error e = EmptyError();
  char longdir[3000];
  size_t i;

  CHECK_STATUS(llm_runtime_create_v2("/nonexistent/model", NULL, &rt, &e), LLM_ERR_NOT_FOUND);
  CHECK(rt == NULL);
  CHECK(e.status == LLM_ERR_NOT_FOUND);
  CHECK(MessageIsTerminated(&e) && strstr(e.message, "/nonexistent/model") != NULL);
  CHECK(e.struct_size == sizeof e);

  e = EmptyError();
  CHECK_STATUS(llm_runtime_create_v2(g_model, NULL, &rt, &e), LLM_OK);
  CHECK(e.status == LLM_OK && e.message[0] == '\0');
  llm_runtime_destroy(rt);
  CHECK_STATUS(llm_runtime_create_v2(g_model, NULL, &rt, NULL), LLM_OK); /* error may be NULL */
  llm_runtime_destroy(rt);

  /* A message longer than the struct holds is cut, still terminated. */
  longdir[0] = '/';
  for (i = 1; i + 1 < sizeof longdir; ++i) longdir[i] = (i % 50 == 0) ? '/' : 'x';
  longdir[sizeof longdir - 1] = '\0';
  e = EmptyError();
  CHECK(llm_runtime_create_v2(longdir, NULL, &rt, &e) != LLM_OK);
  CHECK(MessageIsTerminated(&e) && strlen(e.message) == LLM_ERROR_MESSAGE_CAPACITY - 1);

  /* An older, smaller llm_error gets only what it has room for. */
  {
    llm_error small;
    memset(&small, 0x5A, sizeof small);
    small.struct_size = 8;
    CHECK_STATUS(llm_runtime_create_v2("/nonexistent/model", NULL, &rt, &small), LLM_ERR_NOT_FOUND);
    CHECK(small.struct_size == 8 && small.status == LLM_ERR_NOT_FOUND && (unsigned char)small.message[0] == 0x5A);
  }

  e = EmptyError();
  CHECK_STATUS(llm_tokenizer_create_v2("/nonexistent/tokenizer", &tok, &e), LLM_ERR_NOT_FOUND);
  CHECK(tok == NULL && e.status == LLM_ERR_NOT_FOUND && strstr(e.message, "/nonexistent/tokenizer") != NULL);
  e = EmptyError();
  CHECK_STATUS(llm_tokenizer_create_v2(g_tokenizer_dir, &tok, &e), LLM_OK);
  CHECK(e.status == LLM_OK && e.message[0] == '\0');
  llm_tokenizer_destroy(tok);
}

/* ---- a failure on one thread, read on another ---- */
typedef struct {
  llm_session* session;
  llm_runtime* runtime;
  llm_tokenizer* tokenizer;
  llm_status append_status, step_status, tokenize_status;
} FailingCalls;

static void* MakeFailingCalls(void* arg) {
  FailingCalls* c = (FailingCalls*)arg;
  int32_t bad = 1 << 30;
  size_t n = 0;
  int32_t ids[2];
  c->append_status = llm_session_append_tokens(c->session, &bad, 1);
  c->step_status = llm_decode_step(c->runtime, NULL, 0, &n); /* one live session, capacity 0 */
  c->tokenize_status = llm_tokenize(c->tokenizer, "In the beginning", 16, 0, ids, 1, &n);
  return NULL;
}

static void TestErrorsByHandleAcrossThreads(void) {
  llm_runtime* rt = NULL;
  llm_session* s = NULL;
  llm_tokenizer* tok = NULL;
  llm_detokenizer* d = NULL;
  llm_error e = EmptyError();
  FailingCalls calls;
  pthread_t th;
  char text[16];
  size_t len = 0;

  CHECK_STATUS(llm_runtime_create(g_model, NULL, &rt), LLM_OK);
  CHECK_STATUS(llm_tokenizer_create(g_tokenizer_dir, &tok), LLM_OK);
  if (!rt || !tok) return;
  CHECK_STATUS(llm_session_create(rt, NULL, &s), LLM_OK);

  /* Nothing recorded yet. */
  CHECK_STATUS(llm_session_last_error(s, &e), LLM_OK);
  CHECK(e.status == LLM_OK && e.message[0] == '\0');
  e = EmptyError();
  CHECK_STATUS(llm_runtime_last_error(rt, &e), LLM_OK);
  CHECK(e.status == LLM_OK && e.message[0] == '\0');

  calls.session = s;
  calls.runtime = rt;
  calls.tokenizer = tok;
  CHECK(pthread_create(&th, NULL, MakeFailingCalls, &calls) == 0);
  CHECK(pthread_join(th, NULL) == 0);
  CHECK(calls.append_status == LLM_ERR_INVALID_ARGUMENT);
  CHECK(calls.step_status == LLM_ERR_BUFFER_TOO_SMALL);
  CHECK(calls.tokenize_status == LLM_ERR_BUFFER_TOO_SMALL);

  /* This thread's own message is not the other thread's; the handles hold theirs. */
  CHECK(strstr(llm_last_error(), "1073741824") == NULL);
  e = EmptyError();
  CHECK_STATUS(llm_session_last_error(s, &e), LLM_OK);
  CHECK(e.status == LLM_ERR_INVALID_ARGUMENT && strstr(e.message, "1073741824") != NULL);
  e = EmptyError();
  CHECK_STATUS(llm_runtime_last_error(rt, &e), LLM_OK);
  CHECK(e.status == LLM_ERR_BUFFER_TOO_SMALL && e.message[0] != '\0');
  e = EmptyError();
  CHECK_STATUS(llm_tokenizer_last_error(tok, &e), LLM_OK);
  CHECK(e.status == LLM_ERR_BUFFER_TOO_SMALL && e.message[0] != '\0');

  /* A successful call does not clear the record; the next failure replaces it. */
  CHECK_STATUS(llm_session_append_tokens(s, kPrompt, 1), LLM_OK);
  e = EmptyError();
  CHECK_STATUS(llm_session_last_error(s, &e), LLM_OK);
  CHECK(e.status == LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_session_cancel(s), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(s, kPrompt, 1), LLM_ERR_INVALID_STATE);
  e = EmptyError();
  CHECK_STATUS(llm_session_last_error(s, &e), LLM_OK);
  CHECK(e.status == LLM_ERR_INVALID_STATE);

  /* Detokenizers record their own failures; creation failures land on the tokenizer. */
  CHECK_STATUS(llm_detokenizer_create(tok, 0, &d), LLM_OK);
  if (d) {
    CHECK_STATUS(llm_detokenizer_push(d, -5, text, sizeof text, &len), LLM_ERR_INVALID_ARGUMENT);
    e = EmptyError();
    CHECK_STATUS(llm_detokenizer_last_error(d, &e), LLM_OK);
    CHECK(e.status == LLM_ERR_INVALID_ARGUMENT && e.message[0] != '\0');
    llm_detokenizer_destroy(d);
  }
  CHECK_STATUS(llm_detokenizer_create(tok, 0, NULL), LLM_ERR_INVALID_ARGUMENT);
  e = EmptyError();
  CHECK_STATUS(llm_tokenizer_last_error(tok, &e), LLM_OK);
  CHECK(e.status == LLM_ERR_INVALID_ARGUMENT && strstr(e.message, "NULL") != NULL);

  /* Bad arguments to the readers themselves. */
  CHECK_STATUS(llm_session_last_error(NULL, &e), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_runtime_last_error(rt, NULL), LLM_ERR_INVALID_ARGUMENT);
  e.struct_size = 0;
  CHECK_STATUS(llm_tokenizer_last_error(tok, &e), LLM_ERR_INVALID_ARGUMENT);

  /* A failure a step reports for the session (here its cancellation) is recorded with its message. */
  {
    llm_session* t = NULL;
    llm_step_result r[2];
    size_t n = 0;
    CHECK_STATUS(llm_session_create(rt, NULL, &t), LLM_OK);
    CHECK_STATUS(llm_session_append_tokens(t, kPrompt, 3), LLM_OK);
    CHECK_STATUS(llm_session_cancel(t), LLM_OK);
    CHECK_STATUS(llm_decode_step(rt, r, 2, &n), LLM_OK);
    CHECK(n >= 1);
    e = EmptyError();
    CHECK_STATUS(llm_session_last_error(t, &e), LLM_OK);
    CHECK(e.status == LLM_ERR_CANCELLED && e.message[0] != '\0');
    llm_session_destroy(t);
  }

  llm_session_destroy(s);
  /* A session created later (possibly at the same address) starts with no record. */
  CHECK_STATUS(llm_session_create(rt, NULL, &s), LLM_OK);
  e = EmptyError();
  CHECK_STATUS(llm_session_last_error(s, &e), LLM_OK);
  CHECK(e.status == LLM_OK);
  llm_runtime_destroy(rt); /* destroys s and forgets both records */
  llm_tokenizer_destroy(tok);
}

/* ---- the tracker's destroy hook runs on every failed creation ---- */
static void CountDestroy(void* user) { ++*(int*)user; }

static void TestTrackerDestroyedOnFailedCreate(void) {
  llm_kv_tracker t;
  llm_runtime_options o;
  llm_runtime* rt = (llm_runtime*)0x1;
  int destroyed = 0;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.user_data = &destroyed;
  t.destroy = CountDestroy;
  llm_runtime_options_init(&o);
  o.tracker = &t;
  o.backend = 99; /* rejected while the options are checked */
  CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_ERR_INVALID_ARGUMENT);
  CHECK(destroyed == 1 && rt == NULL);
  o.backend = LLM_BACKEND_CPU;
  CHECK_STATUS(llm_runtime_create(NULL, &o, &rt), LLM_ERR_INVALID_ARGUMENT); /* no model_dir */
  CHECK(destroyed == 2);
  CHECK_STATUS(llm_runtime_create("/nonexistent/model", &o, &rt), LLM_ERR_NOT_FOUND);
  CHECK(destroyed == 3);
  CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_OK);
  CHECK(destroyed == 3);
  llm_runtime_destroy(rt);
  CHECK(destroyed == 4);
  o.struct_size = 2; /* unreadable options: nothing is read, so nothing is destroyed */
  CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_ERR_INVALID_ARGUMENT);
  CHECK(destroyed == 4);
}

/* ---- llm_decode_step_v2 ---- */
typedef struct {
  llm_step_result r;
  uint64_t future_field_a; /* what a newer header might append */
  uint64_t future_field_b;
} BiggerStepResult;

static void TestDecodeStepV2(void) {
  llm_runtime* rt = NULL;
  llm_session* s = NULL;
  BiggerStepResult results[2];
  int32_t got[16];
  int ngot = 0, guard = 0;
  size_t n = 0, i;
  llm_runtime_options o;
  llm_runtime_options_init(&o);
  o.kv_dtype = LLM_KV_DTYPE_F32;
  CHECK_STATUS(llm_runtime_create(g_model, &o, &rt), LLM_OK);
  if (!rt) return;
  CHECK_STATUS(llm_session_create(rt, NULL, &s), LLM_OK);
  CHECK_STATUS(llm_session_append_tokens(s, kPrompt, sizeof kPrompt / sizeof kPrompt[0]), LLM_OK);

  CHECK_STATUS(llm_decode_step_v2(rt, results, 40, 2, &n), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_decode_step_v2(rt, results, 52, 2, &n), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_decode_step_v2(rt, results, 1 << 20, 2, &n), LLM_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(llm_decode_step_v2(rt, NULL, sizeof(BiggerStepResult), 0, &n), LLM_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 1);

  while (ngot < 9 && guard++ < 64) {
    memset(results, 0xAB, sizeof results);
    CHECK_STATUS(llm_decode_step_v2(rt, results, sizeof(BiggerStepResult), 2, &n), LLM_OK);
    CHECK(n == 1);
    if (n != 1) break;
    CHECK(results[0].r.session == s && results[0].r.status == LLM_OK);
    CHECK(results[0].future_field_a == 0 && results[0].future_field_b == 0); /* zeroed, not left */
    CHECK(((const unsigned char*)&results[1])[0] == 0xAB);                   /* untouched */
    if (results[0].r.token != LLM_TOKEN_NONE) got[ngot++] = results[0].r.token;
  }
  CHECK(ngot == 9);
  for (i = 0; i < 9 && (int)i < ngot; ++i) CHECK(got[i] == kGen[i]);
  llm_runtime_destroy(rt);
}

/* ---- log callback with a destroy hook ---- */
typedef struct {
  int lines, destroyed;
} LogState;

static void OnLog(void* user, llm_log_level level, const char* message) {
  (void)level;
  (void)message;
  ((LogState*)user)->lines++;
}
static void OnLogDestroy(void* user) { ((LogState*)user)->destroyed++; }

static void TestLogCallbackDestroy(void) {
  LogState a = {0, 0}, b = {0, 0};
  CHECK_STATUS(llm_set_log_callback_v2(OnLog, &a, LLM_LOG_OFF + 1, OnLogDestroy), LLM_ERR_INVALID_ARGUMENT);
  CHECK(a.destroyed == 0); /* a failed call keeps ownership with the caller */
  CHECK_STATUS(llm_set_log_callback_v2(OnLog, &a, LLM_LOG_DEBUG, OnLogDestroy), LLM_OK);
  CHECK(a.destroyed == 0);
  CHECK_STATUS(llm_set_log_callback_v2(OnLog, &b, LLM_LOG_DEBUG, OnLogDestroy), LLM_OK);
  CHECK(a.destroyed == 1 && b.destroyed == 0);
  CHECK_STATUS(llm_set_log_callback(NULL, NULL, LLM_LOG_INFO), LLM_OK); /* v1 replacing v2 */
  CHECK(a.destroyed == 1 && b.destroyed == 1);
  CHECK_STATUS(llm_set_log_callback_v2(NULL, &a, LLM_LOG_INFO, OnLogDestroy), LLM_OK); /* ignored */
  CHECK_STATUS(llm_set_log_callback(NULL, NULL, LLM_LOG_INFO), LLM_OK);
  CHECK(a.destroyed == 1);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s TEST_DATA_DIR\n", argv[0]);
    return 2;
  }
  snprintf(g_model, sizeof g_model, "%s/tiny_kimi_k2_qlora_yarn", argv[1]);
  snprintf(g_tokenizer_dir, sizeof g_tokenizer_dir, "%s/tokenizers/kimi", argv[1]);
  TestCreateV2();
  TestErrorsByHandleAcrossThreads();
  TestTrackerDestroyedOnFailedCreate();
  TestDecodeStepV2();
  TestLogCallbackDestroy();
  printf("%d passed, %d failed\n", g_checks - g_failures, g_failures);
  return g_failures == 0 ? 0 : 1;
}
