// The checkpoints llm-bench measures: their config.json, tensor list, the bytes one decode step
// at batch 1 reads, and the writer. Engine code (`WriteSafetensors`, bf16 rounding) is used here,
// in a build tool, so that llm-bench itself needs only the public header.
#ifndef LLMRT_TOOLS_MAKE_BENCH_MODEL_BENCH_MODEL_H_
#define LLMRT_TOOLS_MAKE_BENCH_MODEL_BENCH_MODEL_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace llmrt::bench {

// The generated model: Kimi K2's layer structure at a size whose per-token weight reads
// (about 1.3 GB at batch 1) are far past the last-level cache.
struct BenchConfig {
  int64_t vocab = 32000, hidden = 4096, layers = 4, heads = 32;
  int64_t q_lora = 1024, kv_lora = 512, nope = 128, rope = 64, v = 128;
  int64_t inter = 8192, moe_inter = 1024, experts = 16, top_k = 8, shared = 1, dense = 1;
  // GLM-5 DSA indexer (GlmMoeDsaForCausalLM) when dsa.
  bool dsa = false;
  int64_t index_topk = 2048, index_heads = 32, index_dim = 128;
  // GLM-4.5 structure (Glm4MoeForCausalLM: GQA with biases, q/k norm, partial rotary) when gqa.
  bool gqa = false;
  int64_t kv_heads = 2, head_dim = 128;
  // Weight storage: "bf16"; "fp8" (every decoder linear but the router, 128x128 block scales, as
  // DeepSeek/Kimi FP8 releases); "int4-g32" / "int4-g128" (routed experts, compressed-tensors
  // pack-quantized, as Kimi K2-Thinking); "int4-g32-all" (every decoder linear but kv_b_proj and
  // the router).
  std::string weights = "bf16";
};

// The weight formats `BenchConfig::weights` accepts.
bool IsKnownWeights(const std::string& weights);

// The smaller models --context compares: attention is a visible share of a step at long context.
BenchConfig ContextConfig(bool dsa, bool gqa = false);

// The decode-bench model of `structure` ("k2": DeepseekV3ForCausalLM, "glm45":
// Glm4MoeForCausalLM, "glm5": GlmMoeDsaForCausalLM) with `layers` layers of width `hidden` (a
// multiple of 128), the other widths scaled from the default's (which is ("k2", 4, 4096)); MoE
// shape (16 experts, 8 per token, one shared, one dense layer) and vocabulary unchanged.
BenchConfig SizedConfig(const std::string& structure, int64_t layers, int64_t hidden);

// The released layer shapes of `structure` ("k2-real": Kimi K2, "glm5-real": GLM-5,
// "glm45-real": GLM-4.5, as tests/data/configs holds them: widths, heads, LoRA ranks, indexer,
// vocabulary) with `layers` layers and `experts` routed experts (top-k 8 or all of them when
// fewer), keeping at least one MoE layer: for synthetic-weight runs (llm-bench --synthetic) of
// real shapes at a size one machine holds. False for another structure.
bool RealConfig(const std::string& structure, int64_t layers, int64_t experts, BenchConfig* c);

// Columns per INT4 scale under c.weights.
int64_t Int4Group(const BenchConfig& c);

// Whether the tensor `name` is stored quantized under c.weights.
bool IsQuantized(const BenchConfig& c, const std::string& name, const std::vector<int64_t>& shape);

// config.json of the model, with its quantization_config when c.weights is not "bf16".
nlohmann::json ConfigJson(const BenchConfig& c);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // logical shape (before packing)
  bool f32 = false;
  bool ones = false;  // norm weights
};

// Every tensor of the unquantized model, in file order.
std::vector<TensorSpec> Tensors(const BenchConfig& c);

// Bytes of weights one decode step at batch 1 reads: everything but the embedding table (one
// row) and the routed experts a token did not select.
double WeightBytesPerToken(const BenchConfig& c);

// Writes config.json and model.safetensors to `dir` unless its config.json already equals the
// one `c` gives and model.safetensors exists. Sets *wrote to whether it wrote. On failure
// prints the error to stderr and returns false.
// When `tokenizer_dir` is not empty its tokenizer.json and tokenizer_config.json are copied to
// `dir` (when missing or different): llama.cpp's converter needs a tokenizer, llmrt does not.
bool WriteCheckpoint(const BenchConfig& c, const std::filesystem::path& dir, const std::filesystem::path& tokenizer_dir,
                     bool* wrote);

// Writes only `dir`/config.json (creating `dir`, replacing the file): the model of `c` for a
// runtime whose weights are made at load (llm_runtime_create_synthetic). False with a message
// printed on failure.
bool WriteConfigOnly(const BenchConfig& c, const std::filesystem::path& dir);

// Describes an arbitrary checkpoint directory (config.json, model.safetensors or a sharded
// index): vocabulary, index_topk (0 without an indexer) and the weight bytes one decode step at
// batch 1 reads, by the rule of WeightBytesPerToken over the tensors as stored (routed experts
// named `.mlp.experts.` counted at num_experts_per_tok / n_routed_experts, the embedding table
// at one row, layers past num_hidden_layers skipped). False with a message printed on error.
struct DirDescription {
  int64_t vocab = 0, index_topk = 0;
  double weight_bytes_per_token = 0;
};
bool DescribeDir(const std::filesystem::path& dir, DirDescription* out);

}  // namespace llmrt::bench

#endif  // LLMRT_TOOLS_MAKE_BENCH_MODEL_BENCH_MODEL_H_
