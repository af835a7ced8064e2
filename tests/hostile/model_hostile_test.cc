// Hostile config.json values and safetensors headers through the public header: inconsistent
// routing, dimensions built to make the loader allocate without bound, wrongly typed fields,
// headers and indexes built to exhaust memory or time, and the log line for configs that leave
// the routing function implicit. Every case runs in a forked child with a time limit and an
// address-space cap (RunIsolated) and asserts the exact status.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "nlohmann/json.hpp"
#include "tests/hostile/hostile_util.h"

namespace llmrt::hostile {
namespace {

using json = nlohmann::json;

const std::string kData = LLMRT_TEST_DATA;
// The committed tiny checkpoints of the three families (8 routed experts in 2 groups, top-1
// group, 2 experts per token; vocab 256).
const char* const kKimi = "tiny_kimi_k2_qlora_yarn";  // DeepseekV3ForCausalLM, YaRN, q LoRA
const char* const kGlm4 = "tiny_glm4_moe";            // Glm4MoeForCausalLM
const char* const kDsa = "tiny_glm_moe_dsa";          // GlmMoeDsaForCausalLM
const char* const kFamilies[] = {kKimi, kGlm4, kDsa};

// Directories made by this suite, removed when the test program ends (forked children leave
// with _exit and remove nothing).
std::vector<std::string>* g_dirs = new std::vector<std::string>();
class RemoveDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const std::string& d : *g_dirs) std::filesystem::remove_all(d);
  }
};
[[maybe_unused]] ::testing::Environment* const g_remove_dirs = ::testing::AddGlobalTestEnvironment(new RemoveDirs());

std::string TempDir(const std::string& name) {
  g_dirs->push_back(MakeTempDir(name));
  return g_dirs->back();
}

json ReadConfig(const std::string& model) { return json::parse(ReadFile(kData + "/" + model + "/config.json")); }

// The committed checkpoint `model` with config.json replaced by the given text; the weights are
// a symbolic link to the committed file (never written through).
std::string ModelWithConfigText(const std::string& model, const std::string& config) {
  const std::string dir = TempDir(model);
  for (const auto& e : std::filesystem::directory_iterator(kData + "/" + model)) {
    const std::string name = e.path().filename().string();
    if (name == "model.safetensors") {
      std::filesystem::create_symlink(e.path(), dir + "/" + name);
    } else if (name != "config.json") {
      std::filesystem::copy_file(e.path(), dir + "/" + name);
    }
  }
  WriteFile(dir + "/config.json", config);
  return dir;
}

std::string ModelWith(const std::string& model, const std::function<void(json&)>& edit) {
  json c = ReadConfig(model);
  edit(c);
  return ModelWithConfigText(model, c.dump());
}

llm_status Sizing(const std::string& dir, int32_t dtype, llm_kv_sizing* out) {
  out->struct_size = sizeof(*out);
  return llm_model_kv_sizing(dir.c_str(), dtype, uint64_t{1} << 30, 16, 4096, out);
}

// Runs `steps` greedy steps of one session on `prompt`; "" when every step succeeded and every
// token is in [0, vocab), else what went wrong. *tokens receives the generated tokens.
std::string Generate(const std::string& dir, const std::vector<int32_t>& prompt, int steps,
                     std::vector<int32_t>* tokens = nullptr, const llm_runtime_options* options = nullptr) {
  llm_runtime* rt = nullptr;
  llm_status st = llm_runtime_create(dir.c_str(), options, &rt);
  if (st != LLM_OK) return ExpectStatus(st, LLM_OK, "runtime_create");
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rt, &info);
  llm_session* s = nullptr;
  std::string err;
  if ((st = llm_session_create(rt, nullptr, &s)) != LLM_OK ||
      (st = llm_session_append_tokens(s, prompt.data(), prompt.size())) != LLM_OK) {
    err = ExpectStatus(st, LLM_OK, "session");
  }
  for (int i = 0; err.empty() && i < steps; ++i) {
    llm_step_result r;
    size_t n = 0;
    st = llm_decode_step(rt, &r, 1, &n);
    if (st != LLM_OK || n != 1 || r.status != LLM_OK) {
      err = ExpectStatus(st != LLM_OK ? st : r.status, LLM_OK, "decode step");
      if (err.empty()) err = "decode step reported " + std::to_string(n) + " results";
    } else if (r.token != LLM_TOKEN_NONE) {
      if (r.token < 0 || static_cast<uint32_t>(r.token) >= info.vocab_size) {
        err = "token " + std::to_string(r.token) + " outside the vocabulary";
      } else if (tokens != nullptr) {
        tokens->push_back(r.token);
      }
    }
    if (r.finish_reason != LLM_FINISH_NONE) break;  // e.g. the context is full
  }
  llm_session_destroy(s);
  llm_runtime_destroy(rt);
  return err;
}

// "" when llm_runtime_create on dir returns `want` with `needle` in the message.
std::string ExpectCreate(const std::string& dir, llm_status want, const std::string& needle) {
  llm_runtime* rt = nullptr;
  const llm_status st = llm_runtime_create(dir.c_str(), nullptr, &rt);
  llm_runtime_destroy(rt);
  std::string err = ExpectStatus(st, want, "runtime_create");
  if (err.empty() && std::string(llm_last_error()).find(needle) == std::string::npos) {
    err = "runtime_create: \"" + std::string(llm_last_error()) + "\" does not name " + needle;
  }
  return err;
}

// ---- class 1: routing -------------------------------------------------------------------------

// A config whose top-k exceeds what its groups hold used to load (GLM-4.5 checked nothing) and
// overflow the router's arrays in the first step. Every family now refuses every inconsistent
// combination, and the largest consistent top-k runs.
TEST(HostileModelConfig, InconsistentRoutingIsRefusedInEveryFamily) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* needle;
  };
  // 8 experts in n_group 2, topk_group 1: at most 4 experts per token.
  const std::vector<Case> cases = {
      {"k above the experts", [](json& c) { c["num_experts_per_tok"] = 9; }, "num_experts_per_tok"},
      {"k above the selected groups", [](json& c) { c["num_experts_per_tok"] = 5; }, "num_experts_per_tok"},
      {"k of 0", [](json& c) { c["num_experts_per_tok"] = 0; }, "num_experts_per_tok"},
      {"k missing", [](json& c) { c.erase("num_experts_per_tok"); }, "num_experts_per_tok"},
      {"n_group not dividing", [](json& c) { c["n_group"] = 3; }, "n_group"},
      {"n_group of 0", [](json& c) { c["n_group"] = 0; }, "n_group"},
      {"topk_group above n_group", [](json& c) { c["topk_group"] = 3; }, "topk_group"},
      {"topk_group of 0", [](json& c) { c["topk_group"] = 0; }, "topk_group"},
      {"no moe_intermediate_size", [](json& c) { c["moe_intermediate_size"] = 0; }, "moe_intermediate_size"},
  };
  for (const char* model : kFamilies) {
    for (const Case& k : cases) {
      const std::string dir = ModelWith(model, k.edit);
      EXPECT_EQ(RunIsolated([&] {
                  std::string err = ExpectCreate(dir, LLM_ERR_FORMAT, k.needle);
                  if (err.empty()) {
                    llm_kv_sizing ks;
                    err = ExpectStatus(Sizing(dir, LLM_KV_DTYPE_BF16, &ks), LLM_ERR_FORMAT, "kv_sizing");
                  }
                  // Before the fix the first step overflowed the heap: run one if it loads.
                  if (!err.empty()) err += "; then " + Generate(dir, {1, 2, 3}, 2);
                  return err;
                }),
                "")
          << model << ": " << k.what;
    }
    // The largest consistent top-k (both groups selected: all 8 experts) loads and runs.
    const std::string dir = ModelWith(model, [](json& c) {
      c["topk_group"] = 2;
      c["num_experts_per_tok"] = 8;
    });
    EXPECT_EQ(RunIsolated([&] { return Generate(dir, {1, 2, 3, 4}, 4); }), "") << model;
  }
}

// ---- class 5: unbounded allocation before validation -----------------------------------------

struct BoundCase {
  const char* model;
  const char* what;
  std::function<void(json&)> edit;
  llm_status want;
  const char* needle;
};

std::string CheckBoundCase(const BoundCase& k, bool sizing_too) {
  const std::string dir = ModelWith(k.model, k.edit);
  return RunIsolated(
      [&] {
        std::string err = ExpectCreate(dir, k.want, k.needle);
        if (err.empty() && sizing_too) {
          llm_kv_sizing ks;
          err = ExpectStatus(Sizing(dir, LLM_KV_DTYPE_F32, &ks), k.want, "kv_sizing");
        }
        return err;
      },
      /*timeout_s=*/20);
}

const uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

// Well-typed but absurd sizes used to allocate gigabytes (rope tables, per-layer vectors) before
// any tensor was compared, and llm_model_kv_sizing reported wrapped numbers for them. Every
// dimension now has a documented bound, checked before anything is sized from it.
TEST(HostileModelConfig, AbsurdDimensionsAreRefusedBeforeAnyAllocation) {
  const std::vector<BoundCase> cases = {
      {kKimi, "rope width 2^29", [](json& c) { c["qk_rope_head_dim"] = 1 << 29; }, LLM_ERR_OUT_OF_RANGE,
       "qk_rope_head_dim"},
      {kKimi, "rope width 2^31", [](json& c) { c["qk_rope_head_dim"] = int64_t{1} << 31; }, LLM_ERR_OUT_OF_RANGE,
       "qk_rope_head_dim"},
      {kGlm4, "GLM head_dim 2^31", [](json& c) { c["head_dim"] = int64_t{1} << 31; }, LLM_ERR_OUT_OF_RANGE, "head_dim"},
      {kGlm4, "GLM implied head_dim 2^16",
       [](json& c) {
         c.erase("head_dim");
         c["hidden_size"] = 1 << 16;
         c["num_attention_heads"] = 1;
         c["num_key_value_heads"] = 1;
       },
       LLM_ERR_OUT_OF_RANGE, "head_dim"},
      {kGlm4, "500k layers", [](json& c) { c["num_hidden_layers"] = 500000; }, LLM_ERR_OUT_OF_RANGE,
       "num_hidden_layers"},
      {kKimi, "2^31 layers", [](json& c) { c["num_hidden_layers"] = int64_t{1} << 31; }, LLM_ERR_OUT_OF_RANGE,
       "num_hidden_layers"},
      {kDsa, "2^63-1 layers", [](json& c) { c["num_hidden_layers"] = std::numeric_limits<int64_t>::max(); },
       LLM_ERR_OUT_OF_RANGE, "num_hidden_layers"},
      {kKimi, "2^64-1 vocab", [](json& c) { c["vocab_size"] = kU64Max; }, LLM_ERR_OUT_OF_RANGE, "vocab_size"},
      {kGlm4, "2^40 vocab", [](json& c) { c["vocab_size"] = int64_t{1} << 40; }, LLM_ERR_OUT_OF_RANGE, "vocab_size"},
      {kKimi, "2^31 hidden", [](json& c) { c["hidden_size"] = int64_t{1} << 31; }, LLM_ERR_OUT_OF_RANGE, "hidden_size"},
      {kGlm4, "2^20 heads", [](json& c) { c["num_attention_heads"] = 1 << 20; }, LLM_ERR_OUT_OF_RANGE,
       "num_attention_heads"},
      {kGlm4, "2^20 KV heads", [](json& c) { c["num_key_value_heads"] = 1 << 20; }, LLM_ERR_OUT_OF_RANGE,
       "num_key_value_heads"},
      {kKimi, "2^40 kv_lora_rank", [](json& c) { c["kv_lora_rank"] = int64_t{1} << 40; }, LLM_ERR_OUT_OF_RANGE,
       "kv_lora_rank"},
      {kKimi, "2^40 q_lora_rank", [](json& c) { c["q_lora_rank"] = int64_t{1} << 40; }, LLM_ERR_OUT_OF_RANGE,
       "q_lora_rank"},
      {kKimi, "2^31 v_head_dim", [](json& c) { c["v_head_dim"] = int64_t{1} << 31; }, LLM_ERR_OUT_OF_RANGE,
       "v_head_dim"},
      {kKimi, "2^31 qk_nope_head_dim", [](json& c) { c["qk_nope_head_dim"] = int64_t{1} << 31; }, LLM_ERR_OUT_OF_RANGE,
       "qk_nope_head_dim"},
      {kKimi, "2^20 experts", [](json& c) { c["n_routed_experts"] = 1 << 20; }, LLM_ERR_OUT_OF_RANGE,
       "n_routed_experts"},
      {kGlm4, "2^40 shared experts", [](json& c) { c["n_shared_experts"] = int64_t{1} << 40; }, LLM_ERR_OUT_OF_RANGE,
       "n_shared_experts"},
      {kGlm4, "2^40 expert width", [](json& c) { c["moe_intermediate_size"] = int64_t{1} << 40; }, LLM_ERR_OUT_OF_RANGE,
       "moe_intermediate_size"},
      {kKimi, "2^40 dense width", [](json& c) { c["intermediate_size"] = int64_t{1} << 40; }, LLM_ERR_OUT_OF_RANGE,
       "intermediate_size"},
      {kKimi, "2^62 positions", [](json& c) { c["max_position_embeddings"] = int64_t{1} << 62; }, LLM_ERR_OUT_OF_RANGE,
       "max_position_embeddings"},
      {kKimi, "2^62 original positions",
       [](json& c) { c["rope_parameters"]["original_max_position_embeddings"] = int64_t{1} << 62; },
       LLM_ERR_OUT_OF_RANGE, "original_max_position_embeddings"},
      {kDsa, "2^40 index_topk", [](json& c) { c["index_topk"] = int64_t{1} << 40; }, LLM_ERR_OUT_OF_RANGE,
       "index_topk"},
      {kDsa, "2^30 indexer heads", [](json& c) { c["index_n_heads"] = 1 << 30; }, LLM_ERR_OUT_OF_RANGE,
       "index_n_heads"},
      {kDsa, "2^31 indexer width", [](json& c) { c["index_head_dim"] = int64_t{1} << 31; }, LLM_ERR_OUT_OF_RANGE,
       "index_head_dim"},
      {kGlm4, "2^40 MTP layers", [](json& c) { c["num_nextn_predict_layers"] = int64_t{1} << 40; },
       LLM_ERR_OUT_OF_RANGE, "num_nextn_predict_layers"},
      {"tiny_glm4_moe_fp8", "2^62 FP8 block",
       [](json& c) {
         c["quantization_config"]["weight_block_size"] = {int64_t{1} << 62, 1};
       },
       LLM_ERR_OUT_OF_RANGE, "weight_block_size"},
      {"tiny_kimi_k2_int4_g32", "2^40 INT4 group",
       [](json& c) {
         c["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = int64_t{1} << 40;
       },
       LLM_ERR_OUT_OF_RANGE, "group_size"},
  };
  for (const BoundCase& k : cases) EXPECT_EQ(CheckBoundCase(k, /*sizing_too=*/true), "") << k.model << ": " << k.what;
}

// num_hidden_layers within its bound but beyond the checkpoint is refused before the loader
// sizes anything per layer, naming the missing tensor; llm_model_kv_sizing (config only)
// reports the exact numbers such a model would have.
TEST(HostileModelConfig, LayerCountIsCheckedAgainstTheTensors) {
  for (const char* model : kFamilies) {
    const std::string dir = ModelWith(model, [](json& c) {
      c["num_hidden_layers"] = 1024;
      c.erase("indexer_types");
      c.erase("mlp_layer_types");
    });
    EXPECT_EQ(RunIsolated([&] {
                std::string err = ExpectCreate(dir, LLM_ERR_NOT_FOUND, "layers.1023.input_layernorm.weight");
                llm_kv_sizing ks;
                if (err.empty()) err = ExpectStatus(Sizing(dir, LLM_KV_DTYPE_F32, &ks), LLM_OK, "kv_sizing");
                if (err.empty() &&
                    (ks.num_layers != 1024 || ks.bytes_per_token != uint64_t{1024} * ks.elements_per_token_layer * 4)) {
                  err = "kv_sizing reported " + std::to_string(ks.num_layers) + " layers, " +
                        std::to_string(ks.bytes_per_token) + " bytes per token";
                }
                return err;
              }),
              "")
        << model;
  }
}

// Every dimension at its bound: llm_model_kv_sizing reports the exact sizes (no wrapped or
// truncated field), for every codec, with budgets up to 2^64 - 1.
TEST(HostileModelConfig, KvSizingAtTheBoundsIsExact) {
  const std::string mla = ModelWith(kDsa, [](json& c) {
    c["num_hidden_layers"] = 1024;
    c.erase("indexer_types");
    c.erase("mlp_layer_types");
    c["kv_lora_rank"] = 1 << 16;
    c["qk_rope_head_dim"] = 4096;
    c["index_head_dim"] = 4096;
    c["max_position_embeddings"] = 1 << 24;
  });
  const std::string gqa = ModelWith(kGlm4, [](json& c) {
    c["num_hidden_layers"] = 1024;
    c["num_attention_heads"] = 1024;
    c["num_key_value_heads"] = 1024;
    c["head_dim"] = 4096;
  });
  struct Case {
    std::string dir;
    uint64_t width, tiled_row;  // elements per token and layer; tiled FP8 bytes per token and layer
  } cases[] = {
      // latent in FP8 tiles of 128 with a 4-byte scale each, rope key in BF16, indexer key tiled
      {mla, 65536 + 4096 + 4096, 65536 + 4 * 512 + 2 * 4096 + 4096 + 4 * 32},
      // keys and values in FP8 with one scale per head
      {gqa, 2 * 1024 * 4096, 2 * 1024 * 4096 + 4 * 2 * 1024},
  };
  for (const Case& k : cases) {
    EXPECT_EQ(RunIsolated([&] {
                for (uint64_t budget : {uint64_t{1} << 30, uint64_t{1} << 50, kU64Max}) {
                  for (int32_t dtype :
                       {LLM_KV_DTYPE_F32, LLM_KV_DTYPE_BF16, LLM_KV_DTYPE_FP8_E4M3, LLM_KV_DTYPE_FP8_E4M3_TILED}) {
                    llm_kv_sizing ks;
                    ks.struct_size = sizeof(ks);
                    const llm_status st = llm_model_kv_sizing(k.dir.c_str(), dtype, budget, 4096, 0xffffffffu, &ks);
                    if (st != LLM_OK) return ExpectStatus(st, LLM_OK, "kv_sizing");
                    const uint64_t row = dtype == LLM_KV_DTYPE_FP8_E4M3_TILED ? k.tiled_row
                                         : dtype == LLM_KV_DTYPE_F32          ? 4 * k.width
                                         : dtype == LLM_KV_DTYPE_BF16         ? 2 * k.width
                                                                              : k.width;
                    const uint64_t per_token = 1024 * row, page = per_token * 4096;
                    const uint64_t pages = budget / page;
                    const uint64_t per_session = (uint64_t{0xffffffffu} + 4095) / 4096;
                    if (ks.num_layers != 1024 || ks.elements_per_token_layer != k.width ||
                        ks.bytes_per_token != per_token || ks.capacity_tokens != pages * 4096 ||
                        ks.max_sessions != pages / per_session) {
                      return "dtype " + std::to_string(dtype) + " budget " + std::to_string(budget) + ": got width " +
                             std::to_string(ks.elements_per_token_layer) + ", " + std::to_string(ks.bytes_per_token) +
                             " B/token, " + std::to_string(ks.capacity_tokens) + " tokens, " +
                             std::to_string(ks.max_sessions) + " sessions; want " + std::to_string(per_token) +
                             " B/token, " + std::to_string(pages * 4096) + " tokens";
                    }
                  }
                }
                return std::string();
              }),
              "");
  }
}

// ---- class 9: wrongly typed and out-of-range fields ------------------------------------------

// Each used to be LLM_ERR_INTERNAL ("unexpected exception" from a JSON accessor), a silent
// default, or undefined behaviour (a double out of the range of the integer or float it was
// converted to). Each is now a status naming the field.
TEST(HostileModelConfig, WronglyTypedFieldsNameTheField) {
  const std::vector<BoundCase> cases = {
      {kKimi, "eos 2^40", [](json& c) { c["eos_token_id"] = int64_t{1} << 40; }, LLM_ERR_OUT_OF_RANGE, "eos_token_id"},
      {kKimi, "eos -1", [](json& c) { c["eos_token_id"] = -1; }, LLM_ERR_FORMAT, "eos_token_id"},
      {kGlm4, "eos string", [](json& c) { c["eos_token_id"] = "</s>"; }, LLM_ERR_FORMAT, "eos_token_id"},
      {kGlm4, "eos list with a string",
       [](json& c) {
         c["eos_token_id"] = {1, "x"};
       },
       LLM_ERR_FORMAT, "eos_token_id"},
      {kDsa, "eos list with 2^32",
       [](json& c) {
         c["eos_token_id"] = {1, int64_t{1} << 32};
       },
       LLM_ERR_OUT_OF_RANGE, "eos_token_id"},
      {kKimi, "bos 1.5", [](json& c) { c["bos_token_id"] = 1.5; }, LLM_ERR_FORMAT, "bos_token_id"},
      {"tiny_kimi_k2_fp8", "quant_method number", [](json& c) { c["quantization_config"]["quant_method"] = 5; },
       LLM_ERR_FORMAT, "quant_method"},
      {"tiny_kimi_k2_fp8", "block size strings",
       [](json& c) {
         c["quantization_config"]["weight_block_size"] = {"a", 1};
       },
       LLM_ERR_FORMAT, "weight_block_size"},
      {"tiny_kimi_k2_fp8", "quantization_config list",
       [](json& c) {
         c["quantization_config"] = {1, 2};
       },
       LLM_ERR_FORMAT, "quantization_config"},
      {"tiny_kimi_k2_int4_g32", "num_bits string",
       [](json& c) { c["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = "4"; },
       LLM_ERR_FORMAT, "num_bits"},
      {"tiny_kimi_k2_int4_g32", "format number", [](json& c) { c["quantization_config"]["format"] = 1; },
       LLM_ERR_FORMAT, "format"},
      {"tiny_kimi_k2_int4_g32", "config group not an object",
       [](json& c) { c["quantization_config"]["config_groups"]["group_0"] = 7; }, LLM_ERR_FORMAT, "group_0"},
      {kKimi, "hidden_act number", [](json& c) { c["hidden_act"] = 3; }, LLM_ERR_FORMAT, "hidden_act"},
      {kKimi, "rope_scaling string",
       [](json& c) {
         c.erase("rope_parameters");
         c["rope_scaling"] = "yarn";
       },
       LLM_ERR_FORMAT, "rope_scaling"},
      {kKimi, "rope_parameters list", [](json& c) { c["rope_parameters"] = {1}; }, LLM_ERR_FORMAT, "rope_parameters"},
      {kKimi, "rope type number", [](json& c) { c["rope_parameters"]["rope_type"] = 5; }, LLM_ERR_FORMAT, "rope_type"},
      {kKimi, "yarn factor string", [](json& c) { c["rope_parameters"]["factor"] = "32"; }, LLM_ERR_FORMAT, "factor"},
      {kKimi, "yarn factor 1e300", [](json& c) { c["rope_parameters"]["factor"] = 1e300; }, LLM_ERR_OUT_OF_RANGE,
       "factor"},
      {kKimi, "yarn factor -1", [](json& c) { c["rope_parameters"]["factor"] = -1; }, LLM_ERR_FORMAT, "factor"},
      {kKimi, "mscale 1e300", [](json& c) { c["rope_parameters"]["mscale"] = 1e300; }, LLM_ERR_OUT_OF_RANGE, "mscale"},
      {kKimi, "attention_factor 1e39", [](json& c) { c["rope_parameters"]["attention_factor"] = 1e39; },
       LLM_ERR_OUT_OF_RANGE, "attention_factor"},
      {kKimi, "rope theta 1", [](json& c) { c["rope_parameters"]["rope_theta"] = 1; }, LLM_ERR_FORMAT, "rope_theta"},
      {kKimi, "unknown rope type", [](json& c) { c["rope_parameters"]["rope_type"] = "llama3"; }, LLM_ERR_UNSUPPORTED,
       "llama3"},
      {kKimi, "top-level rope_theta 0", [](json& c) { c["rope_theta"] = 0; }, LLM_ERR_FORMAT, "rope_theta"},
      {kGlm4, "rope_theta string", [](json& c) { c["rope_parameters"]["rope_theta"] = "1e6"; }, LLM_ERR_FORMAT,
       "rope_theta"},
      {kGlm4, "partial_rotary_factor 2", [](json& c) { c["rope_parameters"]["partial_rotary_factor"] = 2.0; },
       LLM_ERR_FORMAT, "partial_rotary_factor"},
      {kGlm4, "partial_rotary_factor 1e300", [](json& c) { c["partial_rotary_factor"] = 1e300; }, LLM_ERR_FORMAT,
       "partial_rotary_factor"},
      {kGlm4, "rotary width 0", [](json& c) { c["rope_parameters"]["partial_rotary_factor"] = 0.01; }, LLM_ERR_FORMAT,
       "partial_rotary_factor"},
      {kKimi, "layers 3.0", [](json& c) { c["num_hidden_layers"] = 3.0; }, LLM_ERR_FORMAT, "num_hidden_layers"},
      {kKimi, "layers \"3\"", [](json& c) { c["num_hidden_layers"] = "3"; }, LLM_ERR_FORMAT, "num_hidden_layers"},
      {kGlm4, "layers true", [](json& c) { c["num_hidden_layers"] = true; }, LLM_ERR_FORMAT, "num_hidden_layers"},
      {kDsa, "layers null", [](json& c) { c["num_hidden_layers"] = nullptr; }, LLM_ERR_FORMAT, "num_hidden_layers"},
      {kKimi, "routed_scaling_factor 1e300", [](json& c) { c["routed_scaling_factor"] = 1e300; }, LLM_ERR_OUT_OF_RANGE,
       "routed_scaling_factor"},
      {kGlm4, "routed_scaling_factor string", [](json& c) { c["routed_scaling_factor"] = "x"; }, LLM_ERR_FORMAT,
       "routed_scaling_factor"},
      {kKimi, "rms_norm_eps -1", [](json& c) { c["rms_norm_eps"] = -1; }, LLM_ERR_FORMAT, "rms_norm_eps"},
      {kGlm4, "norm_topk_prob 1", [](json& c) { c["norm_topk_prob"] = 1; }, LLM_ERR_FORMAT, "norm_topk_prob"},
      {kKimi, "architectures string", [](json& c) { c["architectures"] = "DeepseekV3ForCausalLM"; }, LLM_ERR_FORMAT,
       "architectures"},
      {kGlm4, "model_type number", [](json& c) { c["model_type"] = 5; }, LLM_ERR_FORMAT, "model_type"},
      {kDsa, "indexer_types string", [](json& c) { c["indexer_types"] = "full"; }, LLM_ERR_FORMAT, "indexer_types"},
      {kDsa, "mlp_layer_types numbers",
       [](json& c) {
         c["mlp_layer_types"] = {1, 2, 3, 4};
       },
       LLM_ERR_FORMAT, "mlp_layer_types"},
      {kDsa, "index_topk_pattern number",
       [](json& c) {
         c.erase("indexer_types");
         c["index_topk_pattern"] = 5;
       },
       LLM_ERR_FORMAT, "index_topk_pattern"},
      {kKimi, "moe_layer_freq 0", [](json& c) { c["moe_layer_freq"] = 0; }, LLM_ERR_FORMAT, "moe_layer_freq"},
      {kKimi, "first_k_dense_replace -1", [](json& c) { c["first_k_dense_replace"] = -1; }, LLM_ERR_FORMAT,
       "first_k_dense_replace"},
      {kKimi, "odd rope width", [](json& c) { c["qk_rope_head_dim"] = 15; }, LLM_ERR_FORMAT, "qk_rope_head_dim"},
      {kKimi, "KimiK25 text_config list",
       [](json& c) {
         json top = {{"architectures", {"KimiK25ForConditionalGeneration"}}, {"text_config", json::array()}};
         c = top;
       },
       LLM_ERR_FORMAT, "text_config"},
  };
  for (const BoundCase& k : cases) EXPECT_EQ(CheckBoundCase(k, /*sizing_too=*/true), "") << k.model << ": " << k.what;
}

// Replaces the contents of `path` without truncating it to zero first (ext4 flushes a file
// truncated and rewritten on close: thousands of cases would wait on the disk).
void Overwrite(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (::pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size())) {
    (void)::ftruncate(fd, static_cast<off_t>(bytes.size()));
  }
  ::close(fd);
}

// Every field the parsers read, in every family, set to each of a list of hostile values: none
// may crash, hang, allocate without bound or come back as LLM_ERR_INTERNAL; a config
// llm_model_kv_sizing accepts is sized without wrapping, and a model that loads runs.
TEST(HostileModelConfig, EveryFieldWithEveryHostileValue) {
  const json values = json::parse(R"([-1, 0, 1, 7, 2147483648, 18446744073709551615, 0.5, 1e300, "x", [], {},
      null, true])");
  // What the parsers read, in any family (a field another family reads is ignored, which costs a
  // load and a step per value).
  const char* const fields[] = {
      "architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps",
      "tie_word_embeddings", "hidden_act", "attention_bias", "use_qk_norm", "q_lora_rank", "kv_lora_rank",
      "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rope_interleave", "partial_rotary_factor",
      "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size", "n_group",
      "topk_group", "first_k_dense_replace", "moe_layer_freq", "routed_scaling_factor", "norm_topk_prob",
      "scoring_func", "topk_method", "num_nextn_predict_layers", "eos_token_id", "bos_token_id", "rope_theta",
      "rope_parameters", "rope_scaling", "quantization_config", "index_topk", "index_head_dim", "index_n_heads",
      "indexer_types", "index_topk_pattern", "index_topk_freq", "index_skip_topk_offset", "mlp_layer_types",
      "rope_parameters/rope_theta", "rope_parameters/rope_type", "rope_parameters/type", "rope_parameters/factor",
      "rope_parameters/mscale", "rope_parameters/mscale_all_dim", "rope_parameters/beta_fast",
      "rope_parameters/beta_slow", "rope_parameters/attention_factor", "rope_parameters/truncate",
      "rope_parameters/original_max_position_embeddings", "rope_parameters/partial_rotary_factor"};
  for (const char* model : kFamilies) {
    const json base = ReadConfig(model);
    std::vector<std::pair<json::json_pointer, json>> cases;
    for (const char* f : fields) {
      for (const json& v : values) cases.emplace_back(json::json_pointer(std::string("/") + f), v);
    }
    const std::string dir = ModelWithConfigText(model, base.dump());
    const std::string progress = dir + "/progress";
    const std::string verdict = RunIsolated(
        [&] {
          // One worker thread and a small cache: thousands of loads.
          llm_runtime_options o;
          llm_runtime_options_init(&o);
          o.num_threads = 1;
          o.kv_budget_bytes = 1 << 20;
          int loaded = 0;
          for (const auto& [ptr, v] : cases) {
            json c = base;
            c[ptr] = v;
            const std::string what = ptr.to_string() + " = " + v.dump();
            Overwrite(progress, what);
            Overwrite(dir + "/config.json", c.dump());
            llm_kv_sizing ks;
            const llm_status sizing = Sizing(dir, LLM_KV_DTYPE_F32, &ks);
            if (sizing == LLM_ERR_INTERNAL) return what + ": kv_sizing: " + llm_last_error();
            if (sizing == LLM_OK &&
                (ks.num_layers == 0 || ks.num_layers > 1024 ||
                 ks.bytes_per_token != uint64_t{ks.num_layers} * ks.elements_per_token_layer * 4)) {
              return what + ": kv_sizing reported " + std::to_string(ks.bytes_per_token) + " bytes per token";
            }
            llm_runtime* rt = nullptr;
            const llm_status st = llm_runtime_create(dir.c_str(), &o, &rt);
            llm_runtime_destroy(rt);
            if (st == LLM_ERR_INTERNAL) return what + ": runtime_create: " + llm_last_error();
            if (st == LLM_OK && sizing != LLM_OK) return what + ": loads, but kv_sizing refuses it";
            if (st != LLM_OK) continue;
            ++loaded;
            // A one-token prompt fits any max_position_embeddings.
            const std::string err = Generate(dir, {1}, 2, nullptr, &o);
            if (!err.empty()) return what + ": " + err;
          }
          return loaded > 0 ? std::string() : std::string("nothing loaded");
        },
        /*timeout_s=*/300);
    EXPECT_EQ(verdict, "") << model << ", last case " << ReadFile(progress);
  }
}

// A config must be small and shallow: config.json beyond 4 MiB is refused before it is read,
// and deep nesting before it is parsed (nlohmann's DOM costs tens of bytes per bracket).
TEST(HostileModelConfig, HugeOrDeepConfigJsonIsRefusedCheaply) {
  const std::string big = TempDir("big_config");
  CopyDir(kData + "/" + kKimi, big);
  {
    const int fd = ::open((big + "/config.json").c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, (off_t{4} << 20) + 1), 0);  // sparse: costs no disk
    ::close(fd);
  }
  const std::string deep = ModelWithConfigText(
      kKimi, "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"x\": " + std::string(8 << 20, '[') + "}");
  const std::string deep_small =
      ModelWithConfigText(kGlm4, "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}");
  EXPECT_EQ(RunIsolated(
                [&] {
                  std::string err = ExpectCreate(big, LLM_ERR_OUT_OF_RANGE, "config.json");
                  llm_kv_sizing ks;
                  if (err.empty())
                    err = ExpectStatus(Sizing(big, LLM_KV_DTYPE_BF16, &ks), LLM_ERR_OUT_OF_RANGE, "sizing");
                  if (err.empty()) err = ExpectCreate(deep, LLM_ERR_OUT_OF_RANGE, "config.json");
                  if (err.empty()) err = ExpectCreate(deep_small, LLM_ERR_FORMAT, "nested");
                  if (err.empty())
                    err = ExpectStatus(Sizing(deep_small, LLM_KV_DTYPE_BF16, &ks), LLM_ERR_FORMAT, "sizing");
                  return err;
                },
                /*timeout_s=*/20),
            "");
}

// ---- class 9: the routing function -------------------------------------------------------------

std::vector<std::pair<int32_t, std::string>>* g_log = nullptr;
void CaptureLog(void*, llm_log_level level, const char* message) { g_log->emplace_back(level, message); }

// transformers drops scoring_func / topk_method when it saves these configs; llmrt routes with
// sigmoid + noaux_tc as transformers does. For the DeepSeek family, whose V2 routed with softmax
// (and llama.cpp reads a missing field so), it says so in a warning, once per config file; GLM
// has only ever routed with sigmoid. A routing function llmrt does not implement is refused.
TEST(HostileModelConfig, ImplicitRoutingFunctionIsLoggedAndOthersRefused) {
  struct Case {
    const char* model;
    std::function<void(json&)> edit;
    llm_status want;
    const char* needle;
    int32_t log_level;  // of the expected line, -1 for none
  };
  const std::vector<Case> cases = {
      {kKimi, [](json&) {}, LLM_OK, "", LLM_LOG_WARNING},
      {kKimi, [](json& c) { c["scoring_func"] = "sigmoid"; }, LLM_OK, "", LLM_LOG_WARNING},  // topk_method implicit
      {kKimi,
       [](json& c) {
         c["scoring_func"] = "sigmoid";
         c["topk_method"] = "noaux_tc";
       },
       LLM_OK, "", -1},
      {kGlm4, [](json&) {}, LLM_OK, "", -1},
      {kDsa, [](json&) {}, LLM_OK, "", -1},
      {kKimi, [](json& c) { c["scoring_func"] = "softmax"; }, LLM_ERR_UNSUPPORTED, "scoring_func \"softmax\"", -1},
      {kGlm4, [](json& c) { c["scoring_func"] = "softmax"; }, LLM_ERR_UNSUPPORTED, "scoring_func \"softmax\"", -1},
      {kDsa, [](json& c) { c["topk_method"] = "greedy"; }, LLM_ERR_UNSUPPORTED, "topk_method \"greedy\"", -1},
      {kGlm4, [](json& c) { c["topk_method"] = "group_limited_greedy"; }, LLM_ERR_UNSUPPORTED, "topk_method", -1},
      {kKimi, [](json& c) { c["scoring_func"] = 7; }, LLM_ERR_FORMAT, "scoring_func", -1},
  };
  for (const Case& k : cases) {
    const std::string dir = ModelWith(k.model, k.edit);
    EXPECT_EQ(RunIsolated([&] {
                std::vector<std::pair<int32_t, std::string>> log;
                g_log = &log;
                llm_set_log_callback(CaptureLog, nullptr, LLM_LOG_DEBUG);
                std::string err = ExpectCreate(dir, k.want, k.needle);
                // The same config again, and its KV sizing: no second line.
                if (err.empty()) err = ExpectCreate(dir, k.want, k.needle);
                llm_kv_sizing ks;
                ks.struct_size = sizeof(ks);
                llm_model_kv_sizing(dir.c_str(), LLM_KV_DTYPE_BF16, 1 << 30, 16, 0, &ks);
                int lines = 0;
                int32_t level = -1;
                for (const auto& [l, m] : log) {
                  if (m.find("scoring_func") != std::string::npos || m.find("topk_method") != std::string::npos) {
                    if (m.find("sigmoid") == std::string::npos) return "log line without the assumption: " + m;
                    level = l;
                    ++lines;
                  }
                }
                if (lines > 1) return "the routing assumption was logged " + std::to_string(lines) + " times";
                if (err.empty() && level != k.log_level) {
                  err = "routing log line at level " + std::to_string(level) + ", expected " +
                        std::to_string(k.log_level);
                }
                return err;
              }),
              "")
        << k.model << " " << k.needle;
  }
}

// ---- safetensors headers -----------------------------------------------------------------------

// model.safetensors with the given header (length-prefixed) followed by `data_bytes` zero bytes.
std::string ModelWithHeader(const std::string& header, size_t data_bytes = 64) {
  const std::string dir = TempDir("header");
  CopyDir(kData + "/" + kKimi, dir);
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xff);
  file += header;
  file.append(data_bytes, '\0');
  WriteFile(dir + "/model.safetensors", file);
  return dir;
}

// Headers built to cost memory or time: nested brackets (40 MiB of them used to take 3 GB and
// 9 s), wide shapes, a header length past the limit. The streaming header parser stops at the
// first byte outside the schema.
TEST(HostileSafetensors, HeaderBombsAreRefusedCheaply) {
  struct Case {
    const char* what;
    std::string dir;
    llm_status want;
    const char* needle;
  };
  std::string wide_shape = R"({"a":{"dtype":"U8","shape":[)";
  for (int i = 0; i < 1000000; ++i) wide_shape += "1,";
  wide_shape += R"(1],"data_offsets":[0,1]}})";
  std::string many_keys = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1])";
  for (int i = 0; i < 1000000; ++i) many_keys += ",\"k" + std::to_string(i) + "\":1";
  many_keys += "}}";
  const std::vector<Case> cases = {
      {"40 MiB of [", ModelWithHeader(std::string(40 << 20, '[')), LLM_ERR_FORMAT, "JSON"},
      {"40 MiB of nesting in an entry", ModelWithHeader("{\"a\":" + std::string(40 << 20, '[')), LLM_ERR_FORMAT,
       "malformed"},
      {"nesting in a field", ModelWithHeader("{\"a\":{\"x\":" + std::string(1 << 20, '{')), LLM_ERR_FORMAT,
       "malformed"},
      {"nesting in __metadata__", ModelWithHeader("{\"__metadata__\":{\"k\":" + std::string(1 << 20, '[')),
       LLM_ERR_FORMAT, "__metadata__"},
      {"a million dimensions", ModelWithHeader(wide_shape), LLM_ERR_OUT_OF_RANGE, "dimensions"},
      // The header is fine (unknown fields are ignored); the checkpoint lacks the model's layers.
      {"a million ignored fields", ModelWithHeader(many_keys), LLM_ERR_NOT_FOUND, "input_layernorm"},
      {"2^49 elements", ModelWithHeader(R"({"a":{"dtype":"U8","shape":[131072,131072,32768],"data_offsets":[0,1]}})"),
       LLM_ERR_OUT_OF_RANGE, "shape too large"},
      {"a dimension of 2^63",
       ModelWithHeader(R"({"a":{"dtype":"U8","shape":[0,9223372036854775808],"data_offsets":[0,0]}})"),
       LLM_ERR_OUT_OF_RANGE, "shape too large"},
      {"duplicate tensor",
       ModelWithHeader(
           R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})"),
       LLM_ERR_FORMAT, "twice"},
      {"misaligned F32",
       ModelWithHeader(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})" + std::string(3, ' ')),
       LLM_ERR_UNSUPPORTED, "aligned"},
      {"offsets past the end", ModelWithHeader(R"({"a":{"dtype":"U8","shape":[65],"data_offsets":[0,65]}})"),
       LLM_ERR_FORMAT, "outside"},
      {"negative offset", ModelWithHeader(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})"), LLM_ERR_FORMAT,
       "data_offsets"},
  };
  for (const Case& k : cases) {
    EXPECT_EQ(RunIsolated([&] { return ExpectCreate(k.dir, k.want, k.needle); }, /*timeout_s=*/20), "") << k.what;
  }
  // A header length past the 100 MB limit, in a file large enough to hold it (sparse).
  const std::string dir = TempDir("long_header");
  CopyDir(kData + "/" + kKimi, dir);
  {
    const uint64_t len = 100'000'001;
    std::string prefix(8, '\0');
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    WriteFile(dir + "/model.safetensors", prefix + "{");
    const int fd = ::open((dir + "/model.safetensors").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(len + 8)), 0);
    ::close(fd);
  }
  EXPECT_EQ(RunIsolated([&] { return ExpectCreate(dir, LLM_ERR_OUT_OF_RANGE, "header length"); }), "");
}

}  // namespace
}  // namespace llmrt::hostile
