// llm-bench --tokenize DIR --text FILE: encoding speed of the tokenizer in DIR over FILE (best of
// --repeats), in MB/s of input text, and one detokenization of the result.
// llm-bench --tokens DIR --text TEXT: the ids of TEXT, to feed the same prompt to another engine.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "modes.h"

namespace llm_bench {

int RunTokenizeBench(const std::string& dir, const std::string& file, int repeats) {
  std::ifstream in(file, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  llm_tokenizer* tok = nullptr;
  if (llm_tokenizer_create(dir.c_str(), &tok) != LLM_OK) {
    std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
    return 1;
  }
  std::vector<int32_t> ids(text.size() + 16);
  size_t n = 0;
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    llm_tokenize(tok, text.data(), text.size(), 0, ids.data(), ids.size(), &n);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::string out(text.size() * 2 + 16, '\0');
  size_t len = 0;
  auto t0 = Clock::now();
  llm_detokenize(tok, ids.data(), n, 0, out.data(), out.size(), &len);
  const double dsec = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("| tokenizer | text | bytes | tokens | encode MB/s | decode MB/s |\n|---|---|---:|---:|---:|---:|\n");
  std::printf("| %s | %s | %zu | %zu | %.2f | %.1f |\n", dir.c_str(), file.c_str(), text.size(), n,
              text.size() / best / 1e6, len / dsec / 1e6);
  llm_tokenizer_destroy(tok);
  return 0;
}

int RunTokenIds(const std::string& dir, const std::string& text) {
  llm_tokenizer* tok = nullptr;
  if (llm_tokenizer_create(dir.c_str(), &tok) != LLM_OK) {
    std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
    return 1;
  }
  // Every id covers at least one byte of text: special tokens are not parsed (parse_special 0).
  std::vector<int32_t> ids(text.size() + 16);
  size_t n = 0;
  const llm_status st = llm_tokenize(tok, text.data(), text.size(), 0, ids.data(), ids.size(), &n);
  llm_tokenizer_destroy(tok);
  if (st != LLM_OK) {
    std::fprintf(stderr, "llm-bench: %s\n", llm_last_error());
    return 1;
  }
  for (size_t i = 0; i < n; ++i) std::printf(i ? ",%d" : "%d", ids[i]);
  std::printf("\n");
  return 0;
}

}  // namespace llm_bench
