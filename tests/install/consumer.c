/* A host program built outside the tree against an installed llmrt (pkg-config): greedy
 * continuation of a committed checkpoint's golden prompt.
 * usage: consumer MODEL_DIR EXPECTED_IDS (comma separated) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llmrt/llmrt.h>

int main(int argc, char** argv) {
  static const int32_t prompt[] = {0, 17, 42, 99, 3, 250, 7};
  llm_runtime_options o;
  llm_runtime* rt = NULL;
  llm_session* s = NULL;
  llm_error err;
  llm_step_result r;
  char got[512] = "";
  int n = 0, steps = 0;
  size_t count = 0;
  if (argc < 3) return 2;
  llm_runtime_options_init(&o);
  o.kv_dtype = LLM_KV_DTYPE_F32;
  err.struct_size = sizeof err;
  if (llm_runtime_create_v2(argv[1], &o, &rt, &err) != LLM_OK) {
    fprintf(stderr, "create: %s\n", err.message);
    return 1;
  }
  if (llm_session_create(rt, NULL, &s) != LLM_OK || llm_session_append_tokens(s, prompt, 7) != LLM_OK) return 1;
  while (n < 9 && steps++ < 64) {
    if (llm_decode_step(rt, &r, 1, &count) != LLM_OK || count != 1 || r.status != LLM_OK) return 1;
    if (r.token == LLM_TOKEN_NONE) continue;
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", n ? "," : "", r.token);
    ++n;
  }
  llm_runtime_destroy(rt);
  printf("llmrt %s (C): %s\n", llm_version(), got);
  return strcmp(got, argv[2]) == 0 ? 0 : 1;
}
