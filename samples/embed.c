/* The smallest useful embedding of llmrt: load a checkpoint, generate from token ids, print. */
#include <stdio.h>
#include <stdlib.h>

#include "llmrt/llmrt.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: embed_c MODEL_DIR\n");
    return 2;
  }
  llm_runtime* rt = NULL;
  llm_status st = llm_runtime_create(argv[1], NULL, &rt);
  if (st != LLM_OK) {
    fprintf(stderr, "%s: %s\n", llm_status_string(st), llm_last_error());
    return 1;
  }
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = 8;
  llm_session* s = NULL;
  const int32_t prompt[] = {0, 17, 42};
  if (llm_session_create(rt, &so, &s) != LLM_OK || llm_session_append_tokens(s, prompt, 3) != LLM_OK) {
    fprintf(stderr, "%s\n", llm_last_error());
    llm_runtime_destroy(rt);
    return 1;
  }
  for (;;) {
    llm_step_result r;
    size_t n = 0;
    if (llm_decode_step(rt, &r, 1, &n) != LLM_OK || n == 0) break;
    if (r.token != LLM_TOKEN_NONE) printf("%d ", r.token);
    if (r.finish_reason != LLM_FINISH_NONE) break;
  }
  printf("\n");
  llm_session_destroy(s);
  llm_runtime_destroy(rt);
  return 0;
}
