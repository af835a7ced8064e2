/* Greedy token ids from llama.cpp for given prompt ids: the other half of bench_vs_llamacpp.sh's
 * check that llama.cpp and llmrt run the same model. Written against llama.cpp's public llama.h
 * (the script compiles it against the llama.cpp it benchmarks); prompt ids go in as ids so that
 * no tokenizer stands between the two engines.
 *
 *   llamacpp_greedy MODEL.gguf N_NEW THREADS ID,ID,...   -> prints N_NEW generated ids, comma-separated
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static int ParseIds(const char* s, llama_token* ids, int cap) {
  int n = 0;
  while (*s != '\0' && n < cap) {
    char* end = NULL;
    const long v = strtol(s, &end, 10);
    if (end == s) return -1;
    ids[n++] = (llama_token)v;
    s = *end == ',' ? end + 1 : end;
  }
  return *s == '\0' ? n : -1;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: llamacpp_greedy MODEL.gguf N_NEW THREADS ID,ID,...\n");
    return 2;
  }
  const int n_new = atoi(argv[2]);
  const int threads = atoi(argv[3]);
  llama_token prompt[4096];
  const int n_prompt = ParseIds(argv[4], prompt, 4096);
  if (n_new < 1 || n_new > 4096 || threads < 1 || n_prompt < 1) {
    fprintf(stderr, "llamacpp_greedy: bad N_NEW, THREADS or ids\n");
    return 2;
  }
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == NULL) {
    fprintf(stderr, "llamacpp_greedy: cannot load %s\n", argv[1]);
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)(n_prompt + n_new + 8);
  cp.n_batch = (uint32_t)(n_prompt > 512 ? n_prompt : 512);
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == NULL) {
    fprintf(stderr, "llamacpp_greedy: cannot create a context\n");
    return 1;
  }
  llama_token next = 0;
  struct llama_batch batch = llama_batch_get_one(prompt, n_prompt);
  for (int i = 0; i < n_new; ++i) {
    if (llama_decode(ctx, batch) != 0) {
      fprintf(stderr, "llamacpp_greedy: llama_decode failed at token %d\n", i);
      return 1;
    }
    const float* logits = llama_get_logits_ith(ctx, -1);
    int best = 0;
    for (int v = 1; v < n_vocab; ++v) {
      if (logits[v] > logits[best]) best = v;
    }
    next = (llama_token)best;
    printf(i ? ",%d" : "%d", best);
    batch = llama_batch_get_one(&next, 1);
  }
  printf("\n");
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
