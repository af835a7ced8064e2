#ifndef LLMRT_TESTS_FUZZ_FUZZ_TARGETS_H_
#define LLMRT_TESTS_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>

namespace llmrt::fuzz {
int Safetensors(const uint8_t* data, size_t size);
int Config(const uint8_t* data, size_t size);
// Tokenizers (fuzz_tokenizer.cc).
int TokenizerText(const uint8_t* data, size_t size);
int TokenizerIds(const uint8_t* data, size_t size);
int TiktokenModel(const uint8_t* data, size_t size);
int TokenizerJson(const uint8_t* data, size_t size);
int TokenizerConfig(const uint8_t* data, size_t size);
int TokenizerRegex(const uint8_t* data, size_t size);
int ChatTemplate(const uint8_t* data, size_t size);
}  // namespace llmrt::fuzz

#endif  // LLMRT_TESTS_FUZZ_FUZZ_TARGETS_H_
