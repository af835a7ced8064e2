/*
 * llmrt: an embeddable inference runtime for the Kimi K2.x and GLM MoE model families.
 * This is the only public header. It is plain C11 and the ABI it describes is stable within
 * one major version (LLMRT_ABI_VERSION_MAJOR, also the shared library's SONAME).
 *
 * Conventions
 *  1. Handles are opaque (llm_runtime, llm_session). The caller owns what it creates and
 *     releases it with the matching _destroy; destroying NULL is a no-op.
 *  2. Every fallible call returns llm_status. LLM_OK is 0; codes are stable and never
 *     renumbered. After a failure, llm_last_error() returns a message for the calling thread
 *     that names the thing at fault (file, tensor, argument). A failed call leaves every
 *     object as it was before the call unless the function says otherwise.
 *  3. NULL is rejected with LLM_ERR_INVALID_ARGUMENT wherever a pointer is required.
 *  4. Options are structs whose first field is struct_size. Fill them with the matching
 *     llm_*_options_init(), then change fields. The library accepts smaller structs from older
 *     headers (missing fields take their defaults). Structs only ever grow at the end.
 *     Output structs (llm_runtime_info) also carry struct_size: set it to sizeof before the call.
 *  5. Threads: all functions may be called from any thread. Calls on one runtime and on its
 *     sessions are safe to make concurrently; they are serialized by the runtime's lock, which
 *     llm_decode_step releases during its forward pass (see there). Distinct runtimes are
 *     independent. llm_last_error() is per thread. REQUIRES: no call uses a session after its
 *     llm_session_destroy, nor a runtime during or after its llm_runtime_destroy.
 *  6. No C++ exception, abort or exit crosses this boundary: bad input is an error status.
 *  7. Token ids are int32_t. Sizes and counts are size_t or fixed-width integers.
 *  8. Versioning: LLMRT_VERSION_* describe the header, llm_version() the library. Shipped
 *     functions never change meaning; new behaviour gets a new function (suffix _v2).
 *  9. Layout: the ABI is that of the platform's 64-bit C compiler (LP64). Structs have no
 *     implicit padding (gaps are explicit reserved fields, which callers leave zero), so a
 *     binding that declares them field by field gets the same layout.
 */
#ifndef LLMRT_LLMRT_H_
#define LLMRT_LLMRT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define LLM_API __declspec(dllexport)
#elif defined(LLMRT_BUILDING_LIBRARY)
#define LLM_API __attribute__((visibility("default")))
#else
#define LLM_API
#endif

#define LLMRT_ABI_VERSION_MAJOR 1
#define LLMRT_VERSION_MAJOR 0
#define LLMRT_VERSION_MINOR 1
#define LLMRT_VERSION_PATCH 0
#define LLMRT_VERSION_STRING "0.1.0"

/* The library's version as "MAJOR.MINOR.PATCH". Static storage; never NULL. */
LLM_API const char* llm_version(void);
/* LLMRT_VERSION_MAJOR * 1000000 + MINOR * 1000 + PATCH of the library. */
LLM_API uint32_t llm_version_number(void);

/* ---- status codes ------------------------------------------------------------------------ */
typedef int32_t llm_status;
#define LLM_OK 0
#define LLM_ERR_INVALID_ARGUMENT 1 /* NULL pointer, bad option value, bad token id */
#define LLM_ERR_NOT_FOUND 2        /* missing directory, file or tensor */
#define LLM_ERR_IO 3               /* a file could not be opened, mapped or read */
#define LLM_ERR_FORMAT 4           /* corrupt, truncated or inconsistent checkpoint data */
#define LLM_ERR_UNSUPPORTED 5      /* unknown architecture, dtype or feature */
#define LLM_ERR_OUT_OF_MEMORY 6    /* host or device allocation failed */
#define LLM_ERR_KV_EXHAUSTED 7     /* no free KV page for a session's next tokens */
#define LLM_ERR_KV_INTEGRITY 8     /* a session's KV pages failed verification */
#define LLM_ERR_CANCELLED 9        /* the session was cancelled */
#define LLM_ERR_INVALID_STATE 10   /* the call is not valid in the object's current state */
#define LLM_ERR_OUT_OF_RANGE 11    /* a position, length or limit was exceeded */
#define LLM_ERR_BUFFER_TOO_SMALL 12 /* an output buffer was too small; the size is reported */
#define LLM_ERR_INTERNAL 13        /* a bug in llmrt; the message says where */

/* A static, human-readable name for a status code ("LLM_ERR_FORMAT"); never NULL. */
LLM_API const char* llm_status_string(llm_status status);
/* The message of the last failed call on this thread; "" when none. Valid until the next
 * llmrt call on this thread. Hosts whose code can move between OS threads from one call to the
 * next (goroutines across cgo calls, async tasks) use the llm_error functions below instead. */
LLM_API const char* llm_last_error(void);

/* ---- errors by handle, for hosts without a fixed thread ------------------------------------
 * The failed call's status and message (what llm_last_error() would return on the calling
 * thread), delivered independently of threads: the creation functions with an error-out
 * parameter (llm_runtime_create_v2, llm_tokenizer_create_v2) fill it on failure, and every
 * handle records the last failure of a call made on it:
 *  - llm_runtime_last_error: calls taking the runtime (llm_session_create, llm_decode_step[_v2],
 *    llm_score, llm_session_import_kv*, llm_runtime_get_info, llm_test_control);
 *  - llm_session_last_error: calls taking the session (append, cancel, get_info, get_logits,
 *    export, get_failed_pages), and the session's failures in llm_decode_step (a step result
 *    has only the status; the message, such as how many KV pages were missing, is here);
 *  - llm_tokenizer_last_error: calls taking the tokenizer (tokenize, detokenize, special_id,
 *    chat_apply_template, get_info, llm_detokenizer_create);
 *  - llm_detokenizer_last_error: push and flush.
 * A record is replaced by the handle's next failure and is not cleared by successful calls; when
 * several threads fail calls on one handle at the same moment, it holds one of their messages.
 * Calls without a handle (llm_model_kv_sizing, llm_convert_checkpoint, llm_set_log_callback*)
 * report through llm_last_error only: make both calls from one OS thread (in Go, inside one cgo
 * call). */
#define LLM_ERROR_MESSAGE_CAPACITY 1024
typedef struct llm_error {
  uint32_t struct_size; /* set by the caller to sizeof(llm_error) */
  llm_status status;    /* the failure's status; LLM_OK when none is recorded */
  char message[LLM_ERROR_MESSAGE_CAPACITY]; /* NUL-terminated; a longer message is cut at a UTF-8
                                               character boundary */
} llm_error;

/* ---- log ---------------------------------------------------------------------------------- */
/* Load-time notes (for example "skipping 1 multi-token-prediction layer") and warnings. By
 * default they are written to stderr from level LLM_LOG_INFO up. */
typedef int32_t llm_log_level;
#define LLM_LOG_DEBUG 0
#define LLM_LOG_INFO 1
#define LLM_LOG_WARNING 2
#define LLM_LOG_ERROR 3
#define LLM_LOG_OFF 4
/* Receives one NUL-terminated line (no trailing newline), valid only during the call. May be
 * called from any thread that calls into llmrt; calls are serialized. */
typedef void (*llm_log_fn)(void* user, llm_log_level level, const char* message);
/* Routes log lines at or above min_level to fn(user, ...); fn NULL restores stderr. Process-wide.
 * LLM_ERR_INVALID_ARGUMENT for a level outside [LLM_LOG_DEBUG, LLM_LOG_OFF]. */
LLM_API llm_status llm_set_log_callback(llm_log_fn fn, void* user, llm_log_level min_level);
/* Releases a host object handed to llmrt as a user pointer. */
typedef void (*llm_destroy_fn)(void* user);
/* As llm_set_log_callback, and the runtime owns `user`: destroy(user) (may be NULL) is called
 * exactly once, when a later llm_set_log_callback[_v2] call replaces this callback, after every
 * call of fn in progress has returned and before that later call returns; never at process exit.
 * With fn NULL, user and destroy are ignored. On failure nothing changes and destroy is not
 * called (the caller keeps `user`). */
LLM_API llm_status llm_set_log_callback_v2(llm_log_fn fn, void* user, llm_log_level min_level,
                                           llm_destroy_fn destroy);

/* ---- runtime ----------------------------------------------------------------------------- */
typedef struct llm_runtime llm_runtime;
typedef struct llm_session llm_session;

#define LLM_BACKEND_AUTO 0 /* CUDA when built, a device is present and it runs the model with the
                              chosen policies (else a warning is logged), otherwise the CPU */
#define LLM_BACKEND_CPU 1
#define LLM_BACKEND_CUDA 2

#define LLM_KV_DTYPE_AUTO 0 /* BF16 */
#define LLM_KV_DTYPE_BF16 1
#define LLM_KV_DTYPE_F32 2 /* exact reference storage, for verification */
#define LLM_KV_DTYPE_FP8_E4M3 3 /* one byte per value, one scale per layer: the checkpoint's k_scale,
                                   else calibrated from the first write of the layer (largest
                                   magnitude, 2x headroom); half the bytes of BF16 */
#define LLM_KV_DTYPE_FP8_E4M3_TILED 4 /* FP8 with one float32 scale per 128-value tile of each token
                                         (per head for GQA), MLA's rope key kept in BF16: 656 B per
                                         token per layer for Kimi K2 (BF16: 1152, flat FP8: 576) */

/* ---- KV-cache integrity ------------------------------------------------------------------
 * Every physical KV page carries a 64-bit tag renewed each time the page is handed out; each
 * session records the tag of every page it maps. With checking on, before every forward pass
 * the runtime verifies, for each scheduled session, that every page it maps still carries the
 * tag it recorded. A mismatch aborts that session alone (its step result has status
 * LLM_ERR_KV_INTEGRITY, finish reason LLM_FINISH_ERROR and the failed pages); the rest of the
 * batch runs unchanged. Off (the default), no verification or event code runs at all. */
#define LLM_KV_INTEGRITY_OFF 0  /* no-op tracker */
#define LLM_KV_INTEGRITY_TAGS 1 /* built-in tag checker */

/* Host callbacks on the KV page life cycle. Any pointer may be NULL. Calls come from the thread
 * inside the llmrt call that caused the event (llm_decode_step for alloc, share, verify and
 * violation; llm_decode_step, llm_session_cancel, llm_session_destroy and llm_runtime_destroy
 * for free; the KV imports for the alloc of the session they create, and its free when the
 * import fails; llm_score for the alloc and free of the pages it holds during the call, under
 * session_id UINT64_MAX, which no session has) while the runtime's lock is held: callbacks must
 * return quickly and must not call llmrt functions on the same runtime. Setting a tracker turns
 * verification on. */
typedef struct llm_kv_tracker {
  uint32_t struct_size;
  uint32_t reserved0;
  void* user_data;
  /* A page was handed to the session with a new tag. */
  void (*on_alloc)(void* user_data, uint64_t session_id, uint32_t page, uint64_t tag);
  /* The session released its hold on the page (the page is free once no one holds it).
   * session_id 0: an orphaned page reclaimed after an integrity failure. */
  void (*on_free)(void* user_data, uint64_t session_id, uint32_t page, uint64_t tag);
  /* to_session now shares a prefix page first computed by from_session (0 if unknown). */
  void (*on_share)(void* user_data, uint64_t from_session, uint64_t to_session, uint32_t page, uint64_t tag);
  /* After the tag check of a session passed: return 0 to let it run, nonzero to veto (the
   * session is aborted with LLM_ERR_KV_INTEGRITY). pages/tags hold its num_pages entries. */
  int32_t (*on_verify)(void* user_data, uint64_t session_id, const uint32_t* pages, const uint64_t* tags,
                       size_t num_pages);
  /* Entry `entry` of the session's page table maps `page`, expected `expected_tag`, found
   * `actual_tag` (0: the page is free). */
  void (*on_violation)(void* user_data, uint64_t session_id, uint32_t entry, uint32_t page,
                       uint64_t expected_tag, uint64_t actual_tag);
  /* Called once when the runtime no longer uses the tracker: at llm_runtime_destroy, or when
   * llm_runtime_create fails for any reason (bad options and arguments included), except when
   * options->struct_size or this struct's struct_size is invalid (nothing is read then). May be
   * NULL. */
  void (*destroy)(void* user_data);
} llm_kv_tracker;

/* What a step does with a session whose next tokens find no free KV page. */
#define LLM_KV_PRESSURE_FAIL 0    /* that session gets LLM_ERR_KV_EXHAUSTED this step, unchanged */
#define LLM_KV_PRESSURE_QUEUE 1   /* a prompt is admitted only when pages for all of it (prompt plus
                                     max_new_tokens) are free, in arrival order; until then it waits */
#define LLM_KV_PRESSURE_PREEMPT 2 /* newer running sessions give up their pages and recompute later
                                     (their tokens do not change with F32 and BF16 KV and one weight
                                     format; the recomputation is a prefill, so FP8 KV's phase
                                     policy and prefill_weights apply to it, and later tokens may
                                     differ there); a session with no newer one to preempt waits */
/* Under QUEUE and PREEMPT a waiting session gets no result; when nothing at all can run, the
 * oldest waiting one gets LLM_ERR_KV_EXHAUSTED (idle or finished sessions hold the pages:
 * destroy them). */

/* The id of a multi-process group of ranks: opaque bytes that one process makes and the host
 * hands to every process of the group (a file, its own RPC...), then passes as
 * llm_runtime_options.comm_id. */
#define LLM_COMM_ID_BYTES 128
typedef struct llm_comm_id {
  int32_t backend;                  /* the ranks' backend: LLM_BACKEND_CPU or LLM_BACKEND_CUDA */
  uint32_t reserved;                /* 0 */
  uint8_t bytes[LLM_COMM_ID_BYTES]; /* CPU: an MPI group tag; CUDA: NCCL's ncclUniqueId */
} llm_comm_id;

/* Makes a new group id for ranks on `backend`. LLM_BACKEND_CPU: ranks in separate processes
 * joined through MPI; the id is a random tag each rank checks when it joins. LLM_BACKEND_CUDA:
 * NCCL's unique id (ncclGetUniqueId, through the libnccl.so.2 found at run time; it names a
 * bootstrap address on this host, so make it on the host of rank 0): LLM_ERR_UNSUPPORTED when
 * NCCL cannot be loaded or cannot make an id (the message gives NCCL's reason). On failure
 * *out_id is left as it was. AUTO or another value: LLM_ERR_INVALID_ARGUMENT. A CUDA id makes the
 * processes CUDA ranks joined through NCCL (one device each: rank % device count); a runtime whose
 * ranks run on the CPU refuses it with LLM_ERR_UNSUPPORTED, and multi-process CUDA ranks without
 * a CUDA id are LLM_ERR_INVALID_ARGUMENT. */
LLM_API llm_status llm_comm_id_create(int32_t backend, llm_comm_id* out_id);

typedef struct llm_runtime_options {
  uint32_t struct_size;
  int32_t backend;              /* LLM_BACKEND_*; default AUTO */
  int32_t num_threads;          /* CPU worker threads; 0 = one per core */
  int32_t kv_dtype;             /* LLM_KV_DTYPE_*; default AUTO */
  uint64_t kv_budget_bytes;     /* bytes for the paged KV cache; 0 = 256 MiB. The pages it holds times
                                   page_size_tokens must stay below 2^31 (LLM_ERR_OUT_OF_RANGE) */
  uint32_t page_size_tokens;    /* tokens per KV page; 0 = 16 */
  uint32_t max_sessions;        /* live sessions at once; 0 = 256 */
  uint32_t max_tokens_per_step; /* token budget of one llm_decode_step; 0 = 512 */
  int32_t weight_memory;        /* LLM_WEIGHT_MEMORY_*: where CPU ranks keep the weights; default AUTO */
  int32_t kv_integrity;         /* LLM_KV_INTEGRITY_*; default OFF */
  int32_t kv_pressure;          /* LLM_KV_PRESSURE_*; default FAIL */
  const llm_kv_tracker* tracker; /* copied at creation; NULL = none. Implies tag checking. */
  int32_t prefix_sharing;       /* share full KV pages of equal prompt prefixes; default 1 */
  uint32_t reserved1;
  /* Storage of the routed experts per phase (LLM_WEIGHTS_*; default AS_STORED for both). A
   * forward pass in which every sequence decodes uses decode_weights, any other (prefill chunks,
   * llm_score) prefill_weights. Different values keep both sets resident (see
   * llm_runtime_info.weight_bytes_*). INT4 is quantized at load (symmetric, round to nearest)
   * from what the checkpoint stores, unless it already is INT4 of that group size. */
  int32_t prefill_weights;
  int32_t decode_weights;
  /* Tensor parallelism: the model is split over tensor_parallel ranks (attention by head, MLPs by
   * intermediate column, embedding and lm_head by vocabulary row; every rank keeps its own KV
   * store of kv_budget_bytes), all-reduced after each block. 0 or 1: one rank. In one process each
   * rank is a thread with its own backend: CPU ranks share num_threads; CUDA ranks take one device
   * each (rank r on device r, collectives through NCCL; fewer devices than ranks: AUTO runs CPU
   * ranks, CUDA is LLM_ERR_UNSUPPORTED naming the device count). The degree must divide the
   * attention heads, the vocabulary and the MLP widths (or the routed experts, with
   * expert_parallel), and quantized blocks and groups must not straddle two ranks' slices: else
   * LLM_ERR_INVALID_ARGUMENT naming the dimension or tensor and the sizes. */
  uint32_t tensor_parallel;
  int32_t expert_parallel;      /* nonzero: routed experts are partitioned whole among the ranks */
  /* Multi-process ranks: world_size > 1 makes this process rank `rank` of world_size (one rank per
   * process, tensor_parallel 0, 1 or world_size); CPU ranks join through MPI (builds with the MPI
   * communicator; LLM_ERR_UNSUPPORTED otherwise), CUDA ranks through NCCL with a CUDA comm_id
   * (below). Every process must make the same calls in the
   * same order: create the same sessions, append the same tokens, step together. */
  uint32_t world_size;
  uint32_t rank;
  uint32_t collective_timeout_ms; /* a rank waits this long for the others in a collective; 0 = 60000 */
  uint32_t reserved_parallel;
  /* Multi-process ranks: the group's id (llm_comm_id_create on one process, the same bytes handed
   * to every process; copied at creation). Every rank checks it against rank 0's when it joins:
   * processes given different ids fail with LLM_ERR_INVALID_ARGUMENT on every rank. NULL: no
   * check (the MPI launcher alone says who belongs to the group). Read only when world_size > 1. */
  const struct llm_comm_id* comm_id;
  /* How matmuls treat their activations (LLM_ACTIVATIONS_*; default EXACT: float32, the
   * reference numerics). INT8 rounds each 32 activations to int8 codes with one float scale and
   * multiplies INT4 weights with integer dot products (W4A8): faster on CPUs, slightly different
   * numerics (see docs); other weights are unaffected. BF16 rounds the activations of matmuls
   * with BF16 weights to bfloat16 and multiplies with bf16 dot products (AVX512_BF16 on CPUs,
   * tensor cores on GPUs), as BF16 GEMMs elsewhere do; other weights are unaffected. FP8 rounds
   * the activations of FP8 block-scaled weights to e4m3 codes, one float32 scale per row and 128
   * columns (largest magnitude / 448), and scales each block's float32 sum of code products by
   * both block scales: Hopper's FP8 block-scaled GEMM, the same arithmetic on CPUs; slightly
   * different numerics; BF16 weights as under BF16, INT4 and F32 weights unaffected. */
  int32_t quantized_activations;
  uint32_t reserved_activations;
} llm_runtime_options;

#define LLM_ACTIVATIONS_EXACT 0 /* float32 activations: the reference numerics */
#define LLM_ACTIVATIONS_INT8 1  /* int8 activations per 32 values, integer dot products */
#define LLM_ACTIVATIONS_BF16 2  /* bfloat16 activations for BF16 and FP8 weights, bf16 dot products (CPU) */
#define LLM_ACTIVATIONS_FP8 3   /* e4m3 activations per 128 values for FP8 block weights (block-scaled GEMM) */

/* Where the CPU backend keeps the weights it runs (device backends keep them in device memory
 * whatever this says). Decode at small batches streams every weight once per token, so the
 * page size decides how often the memory system stops to walk page tables and restart its
 * prefetch streams: on an AMD Zen 4 VM (2 threads, GLM-4.5 layer shapes) batch-1 decode from
 * 2 MiB pages ran 1.1-1.3x its rate from the file mapping's 4 KiB pages. */
#define LLM_WEIGHT_MEMORY_AUTO 0       /* HUGE_PAGES where the kernel offers transparent huge pages
                                          (/sys/kernel/mm/transparent_hugepage/enabled is not
                                          "never"), else MAPPED */
#define LLM_WEIGHT_MEMORY_MAPPED 1     /* read in place from the checkpoint's read-only file mapping:
                                          no copy, pages shared with every process that maps the
                                          same files, 4 KiB pages */
#define LLM_WEIGHT_MEMORY_HUGE_PAGES 2 /* copied at load into private memory advised for 2 MiB pages
                                          (madvise MADV_HUGEPAGE; a kernel without transparent huge
                                          pages gives 4 KiB ones); the file mapping is released once
                                          loaded. Same resident size, a private copy per process */
#define LLM_WEIGHT_MEMORY_DEVICE 3     /* llm_runtime_info only: the weights are in device memory */

#define LLM_WEIGHTS_AS_STORED 0
#define LLM_WEIGHTS_INT4_G32 1  /* INT4, one bf16 scale per 32 columns */
#define LLM_WEIGHTS_INT4_G128 2 /* INT4, one bf16 scale per 128 columns */

/* Where an FP8 KV cache takes its per-layer scales from. */
#define LLM_KV_SCALE_NONE 0       /* not an FP8 cache */
#define LLM_KV_SCALE_CHECKPOINT 1 /* the checkpoint's self_attn.k_scale (and v_scale) tensors */
#define LLM_KV_SCALE_CALIBRATED 2 /* the largest magnitude of each layer's first write, with 2x headroom */
#define LLM_KV_SCALE_PER_TILE 3   /* the tiled codec: each token's tiles carry their own scales */

/* Fills *options with defaults, including struct_size. */
LLM_API void llm_runtime_options_init(llm_runtime_options* options);

/* Loads the Hugging Face checkpoint in directory model_dir (config.json plus model.safetensors
 * or model.safetensors.index.json and its shards), validates every tensor against the config,
 * and sets up the backend and KV pool. options may be NULL for defaults.
 * On success *out_runtime owns the loaded model; release it with llm_runtime_destroy.
 * On failure *out_runtime is set to NULL.
 *
 * Limits. Before anything is allocated from them, every config.json field read is checked for
 * its JSON type (LLM_ERR_FORMAT naming the field) and against these bounds (LLM_ERR_OUT_OF_RANGE
 * above them; each is many times the largest released Kimi, GLM or DeepSeek value):
 * config.json 4 MiB and 32 levels of nesting; vocab_size 2^24; hidden_size, q_lora_rank and
 * kv_lora_rank 65,536; intermediate_size and moe_intermediate_size 262,144; num_hidden_layers
 * 1,024; attention, key/value and indexer heads 1,024; every per-head width (head_dim,
 * qk_nope/qk_rope/v_head_dim, index_head_dim) 4,096; n_routed_experts 8,192; n_shared_experts
 * 64; max_position_embeddings and index_topk 2^24; FP8 block and INT4 group sizes 65,536; real
 * parameters (YaRN factor, mscales, betas, routed_scaling_factor) finite and at most 10^6,
 * rope_theta in (1, 10^12]; token ids in [0, 2^31). Routing must be consistent
 * (1 <= num_experts_per_tok <= n_routed_experts / n_group * topk_group, n_group dividing the
 * experts, 1 <= topk_group <= n_group) and use sigmoid scores with noaux_tc top-k (others are
 * LLM_ERR_UNSUPPORTED; a DeepSeek-family config that omits scoring_func is logged as assuming
 * them). The checkpoint must hold the last layer num_hidden_layers declares. A safetensors
 * header is at most 100,000,000 bytes (the safetensors library's limit) and is read and checked
 * before its file is mapped: at most 2^20 tensors per file and per checkpoint, at most 8
 * dimensions and 2^48 elements per tensor, data inside the file and aligned to its element
 * size (LLM_ERR_UNSUPPORTED otherwise). model.safetensors.index.json is at most 64 MiB naming
 * at most 4,096 shards, each a file of model_dir ('/', ".." and NUL are refused). Only regular
 * files are read (a FIFO or device is LLM_ERR_IO, never waited on); symbolic links are
 * followed. Every size derived from values within these bounds fits in 64 bits, so
 * llm_model_kv_sizing below never reports a wrapped number. */
LLM_API llm_status llm_runtime_create(const char* model_dir, const llm_runtime_options* options,
                                      llm_runtime** out_runtime);
/* A runtime whose weights are made at load instead of read: for benchmarks and capacity planning
 * of real layer shapes (a Kimi K2, GLM-5 or GLM-4.5 config.json, with fewer layers or experts)
 * without a multi-GB checkpoint on disk. config_dir holds a config.json; nothing else in it is
 * read (no safetensors). Its tokens are meaningless: the weights are random, not trained.
 *
 * Every tensor the model asks for is generated, deterministically from seed and the tensor's
 * name (the same seed gives identical weights, hence identical tokens; another seed different
 * ones), in the storage the released checkpoints of that config use: with an "fp8"
 * quantization_config every decoder-layer linear is FP8 e4m3 with float32 block scales of its
 * weight_block_size (the MoE router and the DSA indexer's weights_proj stay BF16); with a
 * compressed-tensors pack-quantized one the routed experts are INT4 with bfloat16 group scales
 * (Kimi K2-Thinking); everything else is BF16, the router's e_score_correction_bias F32. Values
 * are those of an initialized model: matrix entries uniform with standard deviation 0.02 (FP8
 * codes never NaN, INT4 scales positive), norm weights 1, biases and the correction bias 0;
 * activations and logits stay finite. There are no FP8 KV scale tensors (an FP8 KV cache
 * calibrates, LLM_KV_SCALE_CALIBRATED). llm_runtime_info reports what a checkpoint of that
 * storage would (num_parameters, weight_bytes, resident bytes by format).
 *
 * Options, config.json validation, limits and statuses are those of llm_runtime_create (NULL
 * config_dir or out_runtime: LLM_ERR_INVALID_ARGUMENT; no config.json: LLM_ERR_NOT_FOUND naming
 * it; an unknown architecture: LLM_ERR_UNSUPPORTED; a bad field: LLM_ERR_FORMAT or
 * LLM_ERR_OUT_OF_RANGE; host memory short for a generated tensor: LLM_ERR_OUT_OF_MEMORY naming
 * the tensor and its bytes; device memory short: as llm_runtime_create reports it). Generation
 * uses every hardware thread for large matrices and holds one matrix at a time in host memory
 * beyond what the backend keeps (the CPU backend keeps the weights in host memory; a device
 * backend uploads each and frees it). On failure *out_runtime is NULL. */
LLM_API llm_status llm_runtime_create_synthetic(const char* config_dir, uint64_t seed,
                                                const llm_runtime_options* options, llm_runtime** out_runtime);
/* llm_runtime_create that also fills *error (may be NULL; its struct_size set by the caller) with
 * the status and message: LLM_OK and "" on success. */
LLM_API llm_status llm_runtime_create_v2(const char* model_dir, const llm_runtime_options* options,
                                         llm_runtime** out_runtime, llm_error* error);
/* The last failure of a call on the runtime (see "errors by handle"). LLM_OK with error->status
 * LLM_OK when there was none. */
LLM_API llm_status llm_runtime_last_error(const llm_runtime* runtime, llm_error* error);

/* Destroys the runtime and every session still alive in it (their handles become invalid).
 * NULL is a no-op. REQUIRES: no other thread uses the runtime or its sessions during or after
 * the call. */
LLM_API void llm_runtime_destroy(llm_runtime* runtime);

typedef struct llm_runtime_info {
  uint32_t struct_size;        /* set by the caller to sizeof(llm_runtime_info) */
  char architecture[64];       /* "DeepseekV3ForCausalLM", NUL-terminated */
  char model_type[32];         /* config.json model_type, e.g. "kimi_k2" */
  int32_t backend;             /* LLM_BACKEND_CPU or LLM_BACKEND_CUDA */
  int32_t kv_dtype;            /* LLM_KV_DTYPE_BF16, _F32, _FP8_E4M3 or _FP8_E4M3_TILED */
  uint32_t vocab_size;
  uint32_t num_layers;
  int32_t weight_memory;       /* LLM_WEIGHT_MEMORY_MAPPED, _HUGE_PAGES (CPU) or _DEVICE in effect */
  uint64_t num_parameters;     /* parameters of the model that runs (vision towers excluded) */
  uint64_t weight_bytes;       /* bytes of those parameters as stored */
  uint64_t kv_bytes_per_token; /* over all layers */
  uint64_t kv_capacity_tokens; /* pages_total * page_size_tokens */
  uint32_t page_size_tokens;
  uint32_t pages_total;
  uint32_t pages_free;
  uint32_t num_sessions;
  uint32_t max_position_embeddings;
  uint32_t pages_shared;          /* pages held by more than one session */
  uint64_t prefix_lookup_tokens;  /* prompt tokens looked up in the prefix cache */
  uint64_t prefix_hit_tokens;     /* of which were served from shared pages */
  uint64_t integrity_violations;  /* sessions aborted by KV verification */
  uint64_t preemptions;           /* sessions preempted under KV pressure */
  uint64_t integrity_check_ns;    /* time spent verifying page tables (and in on_verify) */
  /* Resident weight bytes (codes plus scales) by storage format; both expert sets when the
   * prefill and decode policies differ. */
  uint64_t weight_bytes_f32;
  uint64_t weight_bytes_bf16;
  uint64_t weight_bytes_fp8;
  uint64_t weight_bytes_int4;
  int32_t prefill_weights;        /* LLM_WEIGHTS_* in effect */
  int32_t decode_weights;
  int32_t kv_scale_source;        /* LLM_KV_SCALE_* */
  uint32_t reserved2;
  uint64_t workspace_bytes;       /* backend memory of the forward-pass workspace, allocated once at
                                     creation from max_tokens_per_step and the model */
  /* Parallelism (kv_bytes_per_token and kv_capacity_tokens above are per rank too). */
  uint32_t tensor_parallel;       /* ranks the model is split over (1: none) */
  int32_t expert_parallel;        /* nonzero: routed experts partitioned by rank */
  uint64_t rank_weight_bytes;     /* resident weight bytes each rank holds */
  uint64_t rank_kv_capacity_tokens; /* tokens each rank's KV store holds (GQA: grows with the degree) */
  uint64_t collective_ns;         /* rank 0's time inside collectives since creation (moving data and
                                     waiting for the other ranks) */
} llm_runtime_info;

/* Fills *info (whose struct_size the caller set). */
LLM_API llm_status llm_runtime_get_info(const llm_runtime* runtime, llm_runtime_info* info);

/* ---- KV sizing from a config alone --------------------------------------------------------- */
typedef struct llm_kv_sizing {
  uint32_t struct_size;              /* set by the caller to sizeof(llm_kv_sizing) */
  int32_t kv_dtype;                  /* the codec sized (AUTO resolved to BF16) */
  uint32_t num_layers;
  uint32_t elements_per_token_layer; /* MLA: kv_lora + rope (+ the DSA indexer key); GQA: 2*kv_heads*head_dim */
  uint64_t bytes_per_token;          /* over all layers: what llm_runtime_info reports for this codec */
  uint64_t capacity_tokens;          /* tokens that kv_budget_bytes holds, in whole pages */
  uint64_t max_sessions;             /* sessions of session_tokens each (whole pages) that fit; 0 if not asked */
} llm_kv_sizing;

/* Sizes the KV cache of the model in model_dir (its config.json only; no weights are read) for
 * kv_dtype, as a runtime with that budget and page size would allocate it. session_tokens 0
 * skips the session count; page_size_tokens 0 means the runtime default. config.json is
 * checked as llm_runtime_create checks it (its "Limits"), with the same statuses. */
LLM_API llm_status llm_model_kv_sizing(const char* model_dir, int32_t kv_dtype, uint64_t kv_budget_bytes,
                                       uint32_t page_size_tokens, uint32_t session_tokens, llm_kv_sizing* out);

/* llm_model_kv_sizing for one rank of a tensor-parallel group of tensor_parallel ranks (0 or 1:
 * one rank): GQA splits its KV heads among the ranks (one each, replicated, when the ranks
 * outnumber them), MLA caches its whole latent on every rank. kv_budget_bytes is per rank. */
LLM_API llm_status llm_model_kv_sizing_v2(const char* model_dir, int32_t kv_dtype, uint64_t kv_budget_bytes,
                                          uint32_t page_size_tokens, uint32_t session_tokens, uint32_t tensor_parallel,
                                          llm_kv_sizing* out);

/* ---- checkpoint conversion ----------------------------------------------------------------- */
#define LLM_CONVERT_INT4 0      /* INT4 compressed-tensors pack-quantized (Kimi K2-Thinking layout) */
#define LLM_CONVERT_FP8_BLOCK 1 /* FP8 e4m3 with 128x128 block scales (DeepSeek / Kimi / GLM FP8 releases) */

typedef struct llm_convert_options {
  uint32_t struct_size;
  int32_t target;            /* LLM_CONVERT_*; default INT4 */
  uint32_t fp8_block;        /* FP8 block rows = cols; 0 = 128 */
  uint32_t int4_group;       /* INT4 columns per scale; 0 = 32 */
  int32_t int4_all_linears;  /* 0: routed experts only; 1: every decoder linear but kv_b_proj, the
                                router and the DSA indexer */
  uint32_t reserved0;
  uint64_t max_shard_bytes;  /* 0 = 5 GiB */
} llm_convert_options;

LLM_API void llm_convert_options_init(llm_convert_options* options);

/* Writes the checkpoint in in_dir (BF16, F32 or FP8 block-scaled) into out_dir (created; must not
 * hold a checkpoint already) with its linear weights quantized as `options` says (NULL:
 * defaults), with the tensor names and quantization_config the Hugging Face ecosystem reads;
 * everything else is written as BF16 (F32 stays F32) and tokenizer files are copied. When
 * summary is not NULL it receives one line per output format (tensor counts and bytes),
 * truncated to capacity with a NUL terminator; *out_len (may be NULL) gets its full length.
 * LLM_ERR_INVALID_ARGUMENT for bad options (a group that is not a multiple of 32) or an out_dir
 * that already holds a checkpoint; LLM_ERR_FORMAT or LLM_ERR_UNSUPPORTED for checkpoints it
 * cannot convert (a group not dividing a matrix's columns, an INT4 source). */
LLM_API llm_status llm_convert_checkpoint(const char* in_dir, const char* out_dir, const llm_convert_options* options,
                                          char* summary, size_t capacity, size_t* out_len);

/* ---- sessions ---------------------------------------------------------------------------- */
typedef struct llm_sampling_options {
  uint32_t struct_size;
  float temperature;           /* 0 = greedy (the default) */
  int32_t top_k;               /* 0 = off */
  float top_p;                 /* 1 = off */
  float min_p;                 /* 0 = off */
  uint32_t max_new_tokens;     /* per generation; 0 = until a stop token or the context ends */
  uint64_t seed;               /* per-session random stream; equal seeds give equal samples */
  const int32_t* stop_tokens;  /* copied at creation; may be NULL when num_stop_tokens is 0 */
  uint32_t num_stop_tokens;
  uint32_t flags;              /* LLM_SAMPLING_* bits; 0 = none (other bits: LLM_ERR_INVALID_ARGUMENT) */
} llm_sampling_options;

/* Sampling runs where the logits are computed (on the device with the CUDA backend), and a step
 * brings back only the sampled ids, plus the logits of the sessions that keep them for
 * llm_session_get_logits (the default). With this flag a session does not keep them: its
 * llm_session_get_logits is LLM_ERR_INVALID_STATE, and a step of such sessions alone copies no
 * logits at all (on CUDA: vocab_size floats per session and step less over the bus). Tokens are
 * the same either way. */
#define LLM_SAMPLING_NO_LOGITS 0x1u

LLM_API void llm_sampling_options_init(llm_sampling_options* options);

/* Creates an empty session. options may be NULL for greedy decoding with no limit.
 * Fails with LLM_ERR_OUT_OF_RANGE when max_sessions sessions are alive. */
LLM_API llm_status llm_session_create(llm_runtime* runtime, const llm_sampling_options* options,
                                      llm_session** out_session);

/* Destroys the session and returns its KV pages to the pool. NULL is a no-op. */
LLM_API void llm_session_destroy(llm_session* session);

/* Queues tokens to be processed by the next llm_decode_step calls (chunked prefill). Allowed
 * on a new session and on one whose generation finished (a new turn; the last generated token
 * is kept in the context). Every id must be in [0, vocab_size), else LLM_ERR_INVALID_ARGUMENT
 * and nothing is queued. LLM_ERR_OUT_OF_RANGE when the context would pass
 * max_position_embeddings. LLM_ERR_INVALID_STATE on a cancelled or failed session. */
LLM_API llm_status llm_session_append_tokens(llm_session* session, const int32_t* tokens,
                                             size_t num_tokens);

/* Cancels the session: it stops at once, is reported once more by llm_decode_step with
 * finish reason LLM_FINISH_CANCELLED and status LLM_ERR_CANCELLED, and releases its KV pages. */
LLM_API llm_status llm_session_cancel(llm_session* session);

#define LLM_SESSION_IDLE 0       /* nothing queued, nothing generating */
#define LLM_SESSION_PREFILL 1    /* prompt tokens queued */
#define LLM_SESSION_DECODING 2   /* generating */
#define LLM_SESSION_FINISHED 3   /* generation ended (stop token or length); may take a new turn */
#define LLM_SESSION_CANCELLED 4
#define LLM_SESSION_FAILED 5     /* a fatal error; see the step result's status */

typedef struct llm_session_info {
  uint32_t struct_size;
  int32_t state;               /* LLM_SESSION_* */
  uint64_t id;                 /* unique within the runtime, increasing in creation order */
  uint32_t num_tokens;         /* tokens in the context (processed into the KV cache) */
  uint32_t num_pending;        /* tokens queued and not yet processed */
  uint32_t num_generated;      /* tokens generated in the current generation */
  uint32_t num_pages;          /* KV pages held */
} llm_session_info;

LLM_API llm_status llm_session_get_info(const llm_session* session, llm_session_info* info);

/* The last failure of a call on the session (see "errors by handle"). */
LLM_API llm_status llm_session_last_error(const llm_session* session, llm_error* error);

/* Copies the logits of the session's most recent sampled position (float32, vocab_size values)
 * into out. *out_count receives vocab_size. LLM_ERR_BUFFER_TOO_SMALL when capacity is too small
 * (out untouched), LLM_ERR_INVALID_STATE before the first sampled position (an imported
 * session's first is the first it samples in this runtime: logits are not exported) and for a
 * session created with LLM_SAMPLING_NO_LOGITS. */
LLM_API llm_status llm_session_get_logits(const llm_session* session, float* out, size_t capacity,
                                          size_t* out_count);

/* ---- stepping ---------------------------------------------------------------------------- */
#define LLM_FINISH_NONE 0      /* still running */
#define LLM_FINISH_STOP 1      /* sampled a stop token (the token is reported) */
#define LLM_FINISH_LENGTH 2    /* max_new_tokens reached or the context is full */
#define LLM_FINISH_CANCELLED 3
#define LLM_FINISH_ERROR 4     /* see status */

#define LLM_TOKEN_NONE (-1)

/* ---- KV export / import (prefill-role and decode-role runtimes) ------------------------- */
/* Serializes a session for llm_session_import_kv into another runtime of the same model: its
 * cached K/V rows of every layer in this runtime's KV codec (with the FP8 scales), its tokens,
 * its pending tokens and sampler state, a model fingerprint and a 64-bit checksum. Call it
 * between steps (for example once the prefill produced the first token). With buffer NULL or
 * capacity too small: LLM_ERR_BUFFER_TOO_SMALL and *out_size = the bytes needed.
 * LLM_ERR_INVALID_STATE for a failed, cancelled or preempted session. */
LLM_API llm_status llm_session_export_kv(llm_session* session, void* buffer, size_t capacity, size_t* out_size);

/* Creates a session in `runtime` from an export, converting the rows to this runtime's KV codec.
 * The session continues exactly where the exporter's stopped (its next step feeds the pending
 * token), sampling with `options` (NULL: defaults) from the exported generator state.
 *
 * What is validated before anything changes: the checksum (it detects accidents; anyone can
 * reseal a tampered blob), the model fingerprint, the codec, that every count matches the
 * blob's size, that the session state and its queues are consistent, that every token
 * (context, pending, held) is in [0, vocab_size), that the length fits max_position_embeddings,
 * that FP8 scales are finite and within [1e-12, 1e12], and that every row value is finite.
 *
 * What an import may affect: only the session it creates. Rows are stored at the layer scales
 * this runtime already has (FP8 -> FP8 keeps the bytes when the scales agree, otherwise values
 * are re-encoded and saturate); it never sets a layer scale and its pages are never shared as
 * prefix pages with other sessions. A per-layer FP8 runtime whose layers have no scale yet (no
 * checkpoint k_scale, nothing computed) refuses it with LLM_ERR_INVALID_STATE: use the
 * authenticated variant below, a checkpoint with k_scale, or run a prompt first.
 *
 * LLM_ERR_FORMAT for a truncated, altered or inconsistent export, LLM_ERR_INVALID_ARGUMENT for
 * one from another model or an authenticated one, LLM_ERR_OUT_OF_RANGE for one longer than the
 * context, LLM_ERR_KV_EXHAUSTED when its pages do not fit (nothing is kept). */
LLM_API llm_status llm_session_import_kv(llm_runtime* runtime, const void* data, size_t size,
                                         const llm_sampling_options* options, llm_session** out_session);

/* Authenticated KV transfer, for role-split deployments that move KV across machines: the export
 * ends with HMAC-SHA256 under `key` (16 to 1024 bytes, a secret the host shares between its
 * prefill and decode runtimes) instead of a checksum. The import verifies the MAC before reading
 * anything (LLM_ERR_FORMAT on a mismatch: altered, truncated, or made with another key), runs the
 * same validation, and then trusts the blob like state this runtime computed: it may set the
 * scale of an FP8 layer that has none yet (the exporter's per-layer scale, or one calibrated on
 * the imported rows), and its pages may be shared as prefix pages. An unauthenticated export is
 * refused by the authenticated import and vice versa. */
LLM_API llm_status llm_session_export_kv_authenticated(llm_session* session, const void* key, size_t key_len,
                                                       void* buffer, size_t capacity, size_t* out_size);
LLM_API llm_status llm_session_import_kv_authenticated(llm_runtime* runtime, const void* data, size_t size,
                                                       const void* key, size_t key_len,
                                                       const llm_sampling_options* options,
                                                       llm_session** out_session);

typedef struct llm_step_result {
  llm_session* session;
  uint64_t session_id;
  int32_t token;          /* the sampled token, or LLM_TOKEN_NONE (prefill still running, error) */
  int32_t finish_reason;  /* LLM_FINISH_* */
  llm_status status;      /* LLM_OK, or why this session did not advance */
  uint32_t num_prefilled; /* prompt tokens processed for this session in this step */
  int32_t failed_page;    /* LLM_ERR_KV_INTEGRITY: the first page that failed, else -1 */
  uint32_t num_failed_pages;
  uint64_t reserved;
} llm_step_result;

/* One scheduler iteration: picks pending prompt chunks (chunked prefill) and one token per
 * decoding session, in session creation order, under max_tokens_per_step and the free KV
 * pages; runs them as one batched forward pass; samples. Writes one result per session that
 * was scheduled or changed state. capacity must be at least the number of live sessions, else
 * LLM_ERR_BUFFER_TOO_SMALL with that number in *out_count, before any work. The check is made
 * under the runtime lock together with the planning of the step, so a session another thread
 * creates meanwhile is either counted or not part of this step: results are never lost.
 * *out_count tells how many results were written.
 * A session that cannot get a KV page is handled by the runtime's kv_pressure policy (by
 * default it gets status LLM_ERR_KV_EXHAUSTED and is not advanced). A failure of one session
 * never disturbs the others. Returns LLM_OK when the step ran, even if some sessions failed.
 * Threads: other threads may create, feed, cancel and destroy sessions while a step runs; the
 * runtime lock is released during the forward pass. A session destroyed or cancelled during
 * the step is not reported by it (a cancelled one is reported by the next step). Two steps on
 * one runtime run one after the other. */
LLM_API llm_status llm_decode_step(llm_runtime* runtime, llm_step_result* results, size_t capacity,
                                   size_t* out_count);
/* llm_decode_step for a results array whose element size the caller states, so that
 * llm_step_result can grow at its end without breaking arrays of it: result_size is the
 * caller's sizeof(llm_step_result) (at least the 48 bytes of version 1, at most 65,536, a
 * multiple of 8). Element i starts at (char*)results + i * result_size; the library writes the
 * fields both sides know and zeroes the caller's bytes beyond its own struct. */
LLM_API llm_status llm_decode_step_v2(llm_runtime* runtime, void* results, size_t result_size, size_t capacity,
                                      size_t* out_count);

/* Teacher-forced scoring of a token sequence (perplexity, accuracy): for every position
 * p < num_tokens - 1, logprobs[p] receives log P(tokens[p+1] | tokens[0..p]) and, when argmax is
 * not NULL, argmax[p] the most likely next token. Both arrays hold num_tokens - 1 entries. Runs
 * outside the sessions (its own KV pages, released before returning), after any running step. */
LLM_API llm_status llm_score(llm_runtime* runtime, const int32_t* tokens, size_t num_tokens, float* logprobs,
                             int32_t* argmax);

/* Pages of a session's page table that failed verification (LLM_ERR_KV_INTEGRITY), up to
 * capacity; *out_count receives how many there are. */
LLM_API llm_status llm_session_get_failed_pages(const llm_session* session, uint32_t* pages, size_t capacity,
                                                size_t* out_count);

/* ---- tokenizers ---------------------------------------------------------------------------
 * A tokenizer is loaded from a checkpoint directory on its own: Kimi's tiktoken.model (+
 * tokenizer_config.json) or GLM's tokenizer.json. It is immutable: every function taking a
 * const llm_tokenizer* is thread-safe. Text is UTF-8; invalid sequences in input are replaced by
 * U+FFFD first (as Python's errors="replace"). Output text buffers receive a NUL terminator when
 * they have room; *out_len never counts it.
 *
 * The directory's files are untrusted input. Every field is checked before use: a missing,
 * wrongly typed or inconsistent one is LLM_ERR_FORMAT naming the file and field, a feature
 * outside the two formats LLM_ERR_UNSUPPORTED, a file that exists but is not a regular file (a
 * FIFO, a directory) LLM_ERR_IO. Loading allocates within these limits (LLM_ERR_OUT_OF_RANGE
 * names the one exceeded):
 *  - each file at most 128 MiB; JSON at most 64 levels deep and 2^23 values;
 *  - token ids below 2^21 (2,097,152, eight times the largest released vocabulary); the ranks
 *    of tiktoken.model exactly 0..n-1 (Kimi numbers its special tokens from n);
 *  - a special (added) token at most 256 bytes, all of them at most 1 MiB; a pre-tokenizer
 *    pattern (pat_str, tokenizer.json's Split regex) at most 64 KiB.
 * config.json, when the directory has one, gives the model's vocab_size (top level, or
 * text_config for Kimi K2.5): released checkpoints pad it past the tokenizer's ids, and ids in
 * that padding decode to nothing (see llm_detokenize).
 *
 * Texts: llm_tokenize takes at most 16 MiB (16,777,216 bytes); llm_detokenize and
 * llm_chat_apply_template produce at most 16 MiB; beyond is LLM_ERR_OUT_OF_RANGE. */
typedef struct llm_tokenizer llm_tokenizer;
typedef struct llm_detokenizer llm_detokenizer;

#define LLM_TOKENIZER_KIMI 1 /* tiktoken.model */
#define LLM_TOKENIZER_GLM 2  /* tokenizer.json */

typedef struct llm_tokenizer_info {
  uint32_t struct_size;
  int32_t family;     /* LLM_TOKENIZER_* */
  uint32_t vocab_size; /* the tokenizer's ids including special tokens (config.json's may be larger) */
  int32_t bos_id;     /* -1 if none */
  int32_t eos_id;     /* -1 if none */
} llm_tokenizer_info;

/* LLM_ERR_NOT_FOUND when the directory has neither tiktoken.model nor tokenizer.json; the other
 * failures as above. */
LLM_API llm_status llm_tokenizer_create(const char* model_dir, llm_tokenizer** out_tokenizer);
/* llm_tokenizer_create that also fills *error (may be NULL), as llm_runtime_create_v2 does. */
LLM_API llm_status llm_tokenizer_create_v2(const char* model_dir, llm_tokenizer** out_tokenizer, llm_error* error);
/* The last failure of a call on the tokenizer, or on the detokenizer (see "errors by handle"). */
LLM_API llm_status llm_tokenizer_last_error(const llm_tokenizer* tokenizer, llm_error* error);
LLM_API llm_status llm_detokenizer_last_error(const llm_detokenizer* detokenizer, llm_error* error);
LLM_API void llm_tokenizer_destroy(llm_tokenizer* tokenizer);
LLM_API llm_status llm_tokenizer_get_info(const llm_tokenizer* tokenizer, llm_tokenizer_info* info);

/* Encodes text[0..text_len). parse_special: special tokens written in the text (e.g.
 * "<|im_end|>") become their ids; 0 encodes them as plain text. *out_count receives the number
 * of ids; LLM_ERR_BUFFER_TOO_SMALL (tokens untouched) when capacity is smaller. The ids are
 * those of the family's reference: tiktoken, cut as Kimi's tokenization_kimi.py cuts a text
 * (every 400,000 characters, and wherever a run of whitespace or of other characters passes
 * 25,000; special tokens and merges never cross a cut), and Hugging Face tokenizers. Time is
 * O(n log n) in the length of a word. The pre-tokenizer regex comes from the files, so it runs
 * under a backtracking budget linear in the text and a bounded match stack: a pattern that
 * exhausts either is LLM_ERR_OUT_OF_RANGE, never a shortened result. text_len at most 16 MiB. */
LLM_API llm_status llm_tokenize(const llm_tokenizer* tokenizer, const char* text, size_t text_len,
                                int32_t parse_special, int32_t* tokens, size_t capacity, size_t* out_count);

/* Decodes ids to text (skip_special: leave special tokens out). LLM_ERR_BUFFER_TOO_SMALL with
 * the needed length in *out_len when capacity < length + 1. An id below the model's vocab_size
 * (config.json's, else the tokenizer's) that has no text, such as one in the padding a sampler
 * can pick, decodes to nothing, as Hugging Face tokenizers' decode skips it (tiktoken would
 * raise). A negative id, or one at or beyond that vocab_size, is LLM_ERR_INVALID_ARGUMENT. */
LLM_API llm_status llm_detokenize(const llm_tokenizer* tokenizer, const int32_t* tokens, size_t num_tokens,
                                  int32_t skip_special, char* text, size_t capacity, size_t* out_len);

/* The id of a special token by its text ("<|im_end|>", "[gMASK]"); LLM_ERR_NOT_FOUND if none. */
LLM_API llm_status llm_tokenizer_special_id(const llm_tokenizer* tokenizer, const char* text, int32_t* out_id);

/* Incremental detokenization for streaming: text is emitted only in whole UTF-8 characters.
 * REQUIRES: the tokenizer outlives the detokenizer. One thread at a time per detokenizer. */
LLM_API llm_status llm_detokenizer_create(const llm_tokenizer* tokenizer, int32_t skip_special,
                                          llm_detokenizer** out_detokenizer);
LLM_API void llm_detokenizer_destroy(llm_detokenizer* detokenizer);
/* Adds a token (or LLM_TOKEN_NONE for none) and writes the text that is ready. When it does not
 * fit, LLM_ERR_BUFFER_TOO_SMALL gives the needed length in *out_len and the text stays ready
 * for the next call (the token was taken). Ids as in llm_detokenize: one in the padding adds
 * nothing; a bad one is LLM_ERR_INVALID_ARGUMENT and is not taken. */
LLM_API llm_status llm_detokenizer_push(llm_detokenizer* detokenizer, int32_t token, char* text, size_t capacity,
                                        size_t* out_len);
/* Writes what is held back (an incomplete character becomes U+FFFD) and resets. */
LLM_API llm_status llm_detokenizer_flush(llm_detokenizer* detokenizer, char* text, size_t capacity, size_t* out_len);

typedef struct llm_chat_message {
  const char* role;    /* "system", "user", "assistant" (Kimi: "tool"; GLM: "observation") */
  const char* content;
} llm_chat_message;

/* Renders messages in the tokenizer family's chat format (encode the result with
 * parse_special = 1). add_generation_prompt appends the assistant turn opener; enable_thinking
 * selects GLM's thinking opener. Content is inserted as is, so special-token text inside a
 * message ("<|im_end|>") becomes that special token when the result is encoded: a host that
 * passes untrusted content and wants it inert encodes that content with parse_special = 0 and
 * assembles the ids itself. The messages and the result at most 16 MiB. */
LLM_API llm_status llm_chat_apply_template(const llm_tokenizer* tokenizer, const llm_chat_message* messages,
                                           size_t num_messages, int32_t add_generation_prompt,
                                           int32_t enable_thinking, char* text, size_t capacity, size_t* out_len);

/* ---- testing hooks ------------------------------------------------------------------------
 * Explicitly unstable: ops and arguments may change between versions. For tests of integrity
 * checking from outside the library. Sessions are named by id (llm_session_info.id). */
#define LLM_TESTCTL_KV_FREE_MAPPED_PAGE 1 /* args {session, entry}: free that page while the session
                                             still maps it; the next allocation reuses it */
#define LLM_TESTCTL_KV_CORRUPT_ENTRY 2    /* args {session, entry, page}: remap one entry */
#define LLM_TESTCTL_KV_SWAP_PAGES 3       /* args {session a, entry a, session b, entry b} */
#define LLM_TESTCTL_RANK_FAIL_NEXT_PASS 4 /* args {rank}: the next forward pass fails on that in-process
                                             rank (as if one of its ops had failed) */
LLM_API llm_status llm_test_control(llm_runtime* runtime, int32_t op, const int64_t* args, size_t num_args);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LLMRT_LLMRT_H_ */
