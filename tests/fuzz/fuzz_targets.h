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
// tests/fuzz/fuzz_model.cc: a safetensors header (the data section is fixed), a shard index
// beside fixed shards, and a config.json whose first byte picks the family's committed weights.
int SafetensorsHeader(const uint8_t* data, size_t size);
int ShardIndex(const uint8_t* data, size_t size);
int ModelConfig(const uint8_t* data, size_t size);
// tests/fuzz/fuzz_kv_import.cc: a KV export (resealed when its last byte is odd) imported into a
// runtime over the tiny Kimi model, then stepped.
int KvImport(const uint8_t* data, size_t size);
}  // namespace llmrt::fuzz

#endif  // LLMRT_TESTS_FUZZ_FUZZ_TARGETS_H_
