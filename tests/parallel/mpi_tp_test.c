/* Multi-process tensor parallelism through the public header alone: run under
 *   mpirun -np 2 llmrt_mpi_tp_test MODEL_DIR ID_FILE
 * each process first decodes the prompts on one process split over two in-process ranks (the
 * reference), then as rank OMPI_COMM_WORLD_RANK of a two-process world joined through MPI, and
 * checks that both give the same tokens. The group id is made by rank 0 (llm_comm_id_create) and
 * handed to rank 1 through ID_FILE, as a host would; then each process makes its own id, and the
 * creation must fail on both with LLM_ERR_INVALID_ARGUMENT. Exit status 0 when all holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmrt/llmrt.h"

#define PROMPTS 3
#define MAX_NEW 9

static const int32_t kPrompt0[] = {0, 17, 42, 99, 3, 250, 7};
static const int32_t kPrompt1[] = {0, 5};
static const int32_t kPrompt2[] = {0, 11, 48, 85, 122, 159, 196, 233, 14, 51, 88, 125, 162, 199, 236, 17, 54};

static int Run(const char* dir, uint32_t tp, uint32_t world, uint32_t rank, const llm_comm_id* id,
               int32_t out[PROMPTS][MAX_NEW]) {
  const int32_t* prompts[PROMPTS] = {kPrompt0, kPrompt1, kPrompt2};
  const size_t lens[PROMPTS] = {sizeof(kPrompt0) / 4, sizeof(kPrompt1) / 4, sizeof(kPrompt2) / 4};
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.kv_dtype = LLM_KV_DTYPE_F32;
  ro.tensor_parallel = tp;
  ro.world_size = world;
  ro.rank = rank;
  ro.collective_timeout_ms = 30000;
  ro.comm_id = id;
  llm_runtime* rt = NULL;
  if (llm_runtime_create(dir, &ro, &rt) != LLM_OK) {
    fprintf(stderr, "rank %u: llm_runtime_create: %s\n", rank, llm_last_error());
    return 1;
  }
  llm_sampling_options so;
  llm_sampling_options_init(&so);
  so.max_new_tokens = MAX_NEW;
  llm_session* s[PROMPTS];
  size_t got[PROMPTS] = {0, 0, 0};
  for (int i = 0; i < PROMPTS; ++i) {
    if (llm_session_create(rt, &so, &s[i]) != LLM_OK || llm_session_append_tokens(s[i], prompts[i], lens[i]) != LLM_OK) {
      fprintf(stderr, "rank %u: session: %s\n", rank, llm_last_error());
      return 1;
    }
  }
  int done = 0;
  for (int step = 0; step < 100 && done < PROMPTS; ++step) {
    llm_step_result r[PROMPTS];
    size_t n = 0;
    if (llm_decode_step(rt, r, PROMPTS, &n) != LLM_OK) {
      fprintf(stderr, "rank %u: llm_decode_step: %s\n", rank, llm_last_error());
      return 1;
    }
    for (size_t k = 0; k < n; ++k) {
      int i = 0;
      while (i < PROMPTS && s[i] != r[k].session) ++i;
      if (i == PROMPTS || r[k].status != LLM_OK) {
        fprintf(stderr, "rank %u: step result status %d\n", rank, (int)r[k].status);
        return 1;
      }
      if (r[k].token != LLM_TOKEN_NONE && got[i] < MAX_NEW) out[i][got[i]++] = r[k].token;
      if (r[k].finish_reason != LLM_FINISH_NONE) ++done;
    }
  }
  for (int i = 0; i < PROMPTS; ++i) llm_session_destroy(s[i]);
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rt, &info);
  llm_runtime_destroy(rt);
  if (info.tensor_parallel != 2) {
    fprintf(stderr, "rank %u: runtime info says tensor_parallel %u\n", rank, info.tensor_parallel);
    return 1;
  }
  return done == PROMPTS ? 0 : 1;
}

/* Rank 0 makes the group id and publishes it in `path` (written whole, then renamed into place);
 * the other ranks wait for the file and read it. */
static int ShareId(uint32_t rank, const char* path, llm_comm_id* id) {
  if (rank == 0) {
    if (llm_comm_id_create(LLM_BACKEND_CPU, id) != LLM_OK) {
      fprintf(stderr, "llm_comm_id_create: %s\n", llm_last_error());
      return 1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (f == NULL || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      fprintf(stderr, "rank 0: cannot write %s\n", path);
      return 1;
    }
    return 0;
  }
  for (int waited = 0; waited < 600; ++waited) { /* up to 60 s */
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      const size_t n = fread(id, sizeof(*id), 1, f);
      fclose(f);
      if (n == 1) return 0;
    }
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "rank %u: no id in %s\n", rank, path);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: mpirun -np 2 %s MODEL_DIR ID_FILE\n", argv[0]);
    return 2;
  }
  const char* env = getenv("OMPI_COMM_WORLD_RANK");
  const uint32_t rank = env != NULL ? (uint32_t)atoi(env) : 0;
  int32_t want[PROMPTS][MAX_NEW], got[PROMPTS][MAX_NEW];
  memset(want, 0, sizeof(want));
  memset(got, 0, sizeof(got));
  /* One file per mpirun job, so that a file left by an earlier run is never read. */
  const char* job = getenv("OMPI_MCA_ess_base_jobid");
  char path[4096];
  snprintf(path, sizeof(path), "%s.%s", argv[2], job != NULL ? job : "0");
  llm_comm_id id;
  if (Run(argv[1], 2, 1, 0, NULL, want) != 0) return 1;
  if (ShareId(rank, path, &id) != 0) return 1;
  if (Run(argv[1], 1, 2, rank, &id, got) != 0) return 1;
  /* Ids of different groups: every rank must refuse to join. */
  llm_comm_id own;
  if (llm_comm_id_create(LLM_BACKEND_CPU, &own) != LLM_OK) return 1;
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.world_size = 2;
  ro.rank = rank;
  ro.collective_timeout_ms = 30000;
  ro.comm_id = &own;
  llm_runtime* rt = NULL;
  const llm_status st = llm_runtime_create(argv[1], &ro, &rt);
  if (st != LLM_ERR_INVALID_ARGUMENT || strstr(llm_last_error(), "differs from rank 0's") == NULL) {
    fprintf(stderr, "rank %u: mismatched ids gave status %d: %s\n", rank, (int)st, llm_last_error());
    return 1;
  }
  for (int i = 0; i < PROMPTS; ++i) {
    for (int k = 0; k < MAX_NEW; ++k) {
      if (want[i][k] != got[i][k]) {
        fprintf(stderr, "rank %u: prompt %d token %d: %d across processes, %d in one process\n", rank, i, k,
                (int)got[i][k], (int)want[i][k]);
        return 1;
      }
    }
  }
  if (rank == 0) remove(path); /* rank 1 read it before the group could form */
  printf("rank %u: %d prompts, every token as one process with tensor_parallel 2\n", rank, PROMPTS);
  return 0;
}
