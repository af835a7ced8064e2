// llm-bench's modes, one file each; main.cc parses the command line and picks one. Each prints
// its table to stdout and returns the process exit status.
#ifndef LLMRT_SAMPLES_BENCH_MODES_H_
#define LLMRT_SAMPLES_BENCH_MODES_H_

#include <string>
#include <vector>

#include "common.h"
#include "generator.h"

namespace llm_bench {

// Default mode (decode.cc): decode tok/s per session count on the checkpoint in `dir` (described
// by `cfg`), and the batch-1 weight-read bandwidth against baselines measured in the same run
// (unless !baselines: --no-baselines, for repeated runs).
int RunDecodeBench(const fs::path& dir, const GeneratedModel& cfg, const std::vector<int>& batches, int steps,
                   int threads, int prompt_len, bool baselines);

// --prefill-lens 128,512 (prefill.cc): prefill tok/s of one session's prompt of each length on
// the checkpoint in `dir`, median and spread of `repeats`, lengths interleaved in every repeat.
int RunPrefillBench(const fs::path& dir, const GeneratedModel& cfg, const std::vector<int>& lens, int repeats,
                    int threads);

// --tokens DIR --text TEXT (tokenize.cc): the token ids the tokenizer in `dir` gives `text`
// (no special tokens added), comma-separated on one line.
int RunTokenIds(const std::string& dir, const std::string& text);

// --integrity (integrity.cc): no-op tracker vs tag checker vs callback tracker on `model`.
int RunIntegrityBench(const std::string& model, const std::vector<int>& batches, int steps, int repeats,
                      int threads);

// --formats (formats.cc): decode and prefill per weight format and KV codec, as ratios to BF16.
int RunFormatBench(const ModelGenerator& gen, const fs::path& base, const std::vector<std::string>& formats,
                   const std::vector<int>& batches, int steps, int threads, int prefill_len);

// --context (context.cc): dense MLA vs MLA + DSA vs GQA at several context lengths.
int RunContextBench(const ModelGenerator& gen, const fs::path& base, const std::vector<int>& contexts,
                    const std::vector<int>& batches, int steps, int threads);

// --kv-table (kv_table.cc): KV bytes per token, capacity and sessions per codec from config files.
int RunKvTable(const std::vector<std::string>& dirs, double budget_gib, int session_tokens);
// --kv-table with --tp N --device-gib G (rank_sizing.cc): per-device weight bytes under tensor
// parallelism and the KV tokens that fit in the rest of a device.
int RunRankSizing(const std::vector<std::string>& dirs, int tp, double device_gib, int session_tokens);

// --tokenize (tokenize.cc): encode and decode speed of the tokenizer in `dir` over `file`.
int RunTokenizeBench(const std::string& dir, const std::string& file, int repeats);

}  // namespace llm_bench

#endif  // LLMRT_SAMPLES_BENCH_MODES_H_
