// Checkpoint layouts: shards, Kimi K2.5 nesting, MTP layers, unsupported dtypes, inconsistent
// quantized checkpoints, FP8 KV scales from the checkpoint, and the converter's output.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/golden/safetensors_io.h"
#include "tests/golden/test_util.h"

namespace llmrt::testing {
namespace {

namespace fs = std::filesystem;

// ---- checkpoint layouts -------------------------------------------------------------------

class LayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() / ("llmrt_layout_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }
  fs::path tmp_;
};

// Rewrites the tiny Kimi checkpoint as two shards with an index, and as a Kimi K2.5 checkpoint
// (nested text_config, language_model. prefix, plus a vision tensor that must be ignored).
TEST_F(LayoutTest, ShardedAndKimiK25LayoutsGiveIdenticalResults) {
  const std::string src = TestData("tiny_kimi_k2_qlora_yarn");
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<TensorToWrite> all;
  for (const auto& [name, info] : file->tensors()) {
    all.push_back({name, info.dtype_name, info.shape, info.data, info.bytes});
  }
  // Sharded.
  const fs::path sharded = tmp_ / "sharded";
  fs::create_directories(sharded);
  fs::copy_file(src + "/config.json", sharded / "config.json");
  std::vector<TensorToWrite> a(all.begin(), all.begin() + all.size() / 2), b(all.begin() + all.size() / 2, all.end());
  ASSERT_TRUE(WriteSafetensors((sharded / "model-00001-of-00002.safetensors").string(), a).ok());
  ASSERT_TRUE(WriteSafetensors((sharded / "model-00002-of-00002.safetensors").string(), b).ok());
  nlohmann::json index;
  for (const auto& t : a) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : b) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  std::ofstream(sharded / "model.safetensors.index.json") << index.dump();
  // Kimi K2.5.
  const fs::path k25 = tmp_ / "k25";
  fs::create_directories(k25);
  std::ifstream cfg_in(src + "/config.json");
  nlohmann::json text = nlohmann::json::parse(cfg_in);
  nlohmann::json cfg = {{"architectures", {"KimiK25ForConditionalGeneration"}},
                        {"model_type", "kimi_k25"},
                        {"vision_config", {{"hidden_size", 8}}},
                        {"text_config", text}};
  std::ofstream(k25 / "config.json") << cfg.dump();
  std::vector<TensorToWrite> renamed = all;
  std::vector<float> vision(8, 1.0f);
  for (auto& t : renamed) t.name = "language_model." + t.name;
  renamed.push_back({"vision_tower.patch_embed.weight", "F32", {8}, vision.data(), 32});
  ASSERT_TRUE(WriteSafetensors((k25 / "model.safetensors").string(), renamed).ok());

  const auto g = LoadGolden(TestData("tiny_kimi_k2_qlora_yarn.golden.json"));
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : g) prompts.push_back(c.prompt);
  const auto base = RunBatch(src, prompts, RunConfig{});
  const auto s = RunBatch(sharded.string(), prompts, RunConfig{});
  const auto k = RunBatch(k25.string(), prompts, RunConfig{});
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(s[i].logits, base[i].logits);
    EXPECT_EQ(k[i].logits, base[i].logits);
    EXPECT_EQ(base[i].tokens, g[i].generated);
  }
}

// A tensor in a dtype the engine does not run (here FP8 for the embedding table) is refused with
// LLM_ERR_UNSUPPORTED naming the tensor, not misread.
TEST_F(LayoutTest, UnsupportedDtypeIsRefusedNamingTheTensor) {
  const std::string src = TestData("tiny_kimi_k2_qlora_yarn");
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  // F16 (a dtype llmrt does not load), then F8_E4M3 without an fp8 quantization_config.
  for (const char* dtype : {"F16", "F8_E4M3"}) {
    std::vector<TensorToWrite> all;
    std::vector<uint8_t> bytes;
    for (const auto& [name, info] : file->tensors()) {
      if (name == "model.embed_tokens.weight") {
        bytes.assign(static_cast<size_t>(info.numel()) * (std::string(dtype) == "F16" ? 2 : 1), 0x38);
        all.push_back({name, dtype, info.shape, bytes.data(), bytes.size()});
      } else {
        all.push_back({name, info.dtype_name, info.shape, info.data, info.bytes});
      }
    }
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    fs::copy_file(src + "/config.json", tmp_ / "config.json");
    ASSERT_TRUE(WriteSafetensors((tmp_ / "model.safetensors").string(), all).ok());
    llm_runtime* rt = nullptr;
    const bool fp8 = std::string(dtype) == "F8_E4M3";
    EXPECT_EQ(llm_runtime_create(tmp_.c_str(), nullptr, &rt), fp8 ? LLM_ERR_FORMAT : LLM_ERR_UNSUPPORTED);
    EXPECT_EQ(rt, nullptr);
    const std::string err = llm_last_error();
    EXPECT_NE(err.find("model.embed_tokens.weight"), std::string::npos) << err;
    EXPECT_NE(err.find(dtype), std::string::npos) << err;
    if (fp8) {
      EXPECT_NE(err.find("quantization_config"), std::string::npos) << err;
    }
  }
}

void CollectLog(void* user, llm_log_level level, const char* message) {
  static_cast<std::vector<std::pair<int, std::string>>*>(user)->emplace_back(level, message);
}

// A GLM-5 checkpoint with its multi-token-prediction layer (model.layers.<num_layers>.*, as
// released) loads, logs that the layer is skipped, and generates exactly as without it.
TEST_F(LayoutTest, MtpLayerIsSkippedWithALogLine) {
  const std::string src = TestData("tiny_glm_moe_dsa");
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<TensorToWrite> all;
  std::vector<std::string> names;
  for (const auto& [name, info] : file->tensors()) {
    all.push_back({name, info.dtype_name, info.shape, info.data, info.bytes});
    // Layer 3's tensors, renamed as layer 4: the MTP layer (plus its own extra tensors).
    if (name.rfind("model.layers.3.", 0) == 0) names.push_back("model.layers.4." + name.substr(15));
  }
  const size_t n = all.size();
  for (size_t i = 0, j = 0; i < n; ++i) {
    if (all[i].name.rfind("model.layers.3.", 0) != 0) continue;
    TensorToWrite t = all[i];
    t.name = names[j++];
    all.push_back(t);
  }
  std::vector<uint16_t> eh(2 * 64, 0);
  all.push_back({"model.layers.4.eh_proj.weight", "BF16", {2, 64}, eh.data(), eh.size() * 2});
  const fs::path mtp = tmp_ / "mtp";
  fs::create_directories(mtp);
  std::ifstream cfg_in(src + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(cfg_in);
  cfg["num_nextn_predict_layers"] = 1;
  std::ofstream(mtp / "config.json") << cfg.dump();
  ASSERT_TRUE(WriteSafetensors((mtp / "model.safetensors").string(), all).ok());

  std::vector<std::pair<int, std::string>> lines;
  ASSERT_EQ(llm_set_log_callback(CollectLog, &lines, LLM_LOG_INFO), LLM_OK);
  const auto g = LoadGolden(TestData("tiny_glm_moe_dsa.golden.json"));
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : g) prompts.push_back(c.prompt);
  const auto with_mtp = RunBatch(mtp.string(), prompts, RunConfig{});
  ASSERT_EQ(llm_set_log_callback(nullptr, nullptr, LLM_LOG_INFO), LLM_OK);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].first, LLM_LOG_INFO);
  EXPECT_NE(lines[0].second.find("skipping 1 multi-token-prediction layer(s) from layer 4"), std::string::npos)
      << lines[0].second;
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(with_mtp[i].tokens, g[i].generated);
}

// Copies a checkpoint directory, editing its config.json and dropping/replacing tensors.
void CopyCheckpoint(const std::string& src, const fs::path& dst, const std::function<void(nlohmann::json&)>& edit_cfg,
                    const std::function<bool(TensorToWrite&)>& keep) {
  fs::remove_all(dst);
  fs::create_directories(dst);
  std::ifstream in(src + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  edit_cfg(cfg);
  std::ofstream(dst / "config.json") << cfg.dump();
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<TensorToWrite> all;
  for (const auto& [name, info] : file->tensors()) {
    TensorToWrite t{name, info.dtype_name, info.shape, info.data, info.bytes};
    if (keep(t)) all.push_back(t);
  }
  ASSERT_TRUE(WriteSafetensors((dst / "model.safetensors").string(), all).ok());
}

llm_status Open(const fs::path& dir) {
  llm_runtime* rt = nullptr;
  const llm_status st = llm_runtime_create(dir.c_str(), nullptr, &rt);
  llm_runtime_destroy(rt);
  return st;
}

// Inconsistent quantized checkpoints are refused with a status and a message naming the problem.
TEST_F(LayoutTest, BadQuantizedCheckpointsAreClearErrors) {
  const std::string int4 = TestData("tiny_kimi_k2_int4_g32"), fp8 = TestData("tiny_kimi_k2_fp8");
  auto keep_all = [](TensorToWrite&) { return true; };
  auto group = [](int g) {
    return [g](nlohmann::json& c) { c["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = g; };
  };
  struct Case {
    std::string what;
    std::string src;
    std::function<void(nlohmann::json&)> cfg;
    std::function<bool(TensorToWrite&)> keep;
    llm_status want;
    std::string message;
  };
  const std::vector<Case> cases = {
      // 96 is a multiple of 32 but does not divide the experts' 128 columns.
      {"group not dividing the row", int4, group(96), keep_all, LLM_ERR_FORMAT, "does not divide"},
      {"group not a multiple of 32", int4, group(48), keep_all, LLM_ERR_UNSUPPORTED, "group_size 48"},
      {"8-bit weights", int4,
       [](nlohmann::json& c) { c["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 8; },
       keep_all, LLM_ERR_UNSUPPORTED, "4-bit"},
      {"missing weight_scale", int4, [](nlohmann::json&) {},
       [](TensorToWrite& t) { return t.name != "model.layers.1.mlp.experts.3.up_proj.weight_scale"; },
       LLM_ERR_NOT_FOUND, "model.layers.1.mlp.experts.3.up_proj.weight_scale"},
      {"packed codes without quantization_config", int4, [](nlohmann::json& c) { c.erase("quantization_config"); },
       keep_all, LLM_ERR_FORMAT, "weight_packed"},
      {"unknown quant_method", fp8, [](nlohmann::json& c) { c["quantization_config"]["quant_method"] = "awq"; },
       keep_all, LLM_ERR_UNSUPPORTED, "awq"},
      {"per-tensor fp8", fp8, [](nlohmann::json& c) { c["quantization_config"].erase("weight_block_size"); },
       keep_all, LLM_ERR_UNSUPPORTED, "weight_block_size"},
      {"missing scale_inv", fp8, [](nlohmann::json&) {},
       [](TensorToWrite& t) { return t.name != "model.layers.2.self_attn.o_proj.weight_scale_inv"; },
       LLM_ERR_NOT_FOUND, "model.layers.2.self_attn.o_proj.weight_scale_inv"},
      // Blocks of 32 need a [4, 4] scale grid for o_proj, the file holds [2, 2].
      {"block size disagreeing with scale_inv", fp8,
       [](nlohmann::json& c) { c["quantization_config"]["weight_block_size"] = {32, 32}; }, keep_all, LLM_ERR_FORMAT,
       "_scale_inv"},
  };
  for (const Case& c : cases) {
    const fs::path dir = tmp_ / "bad";
    CopyCheckpoint(c.src, dir, c.cfg, c.keep);
    EXPECT_EQ(Open(dir), c.want) << c.what << ": " << llm_last_error();
    EXPECT_NE(std::string(llm_last_error()).find(c.message), std::string::npos) << c.what << ": " << llm_last_error();
  }
}

int32_t ScaleSource(const fs::path& dir, int32_t kv) {
  llm_runtime_options ro;
  llm_runtime_options_init(&ro);
  ro.kv_dtype = kv;
  llm_runtime* rt = nullptr;
  if (llm_runtime_create(dir.c_str(), &ro, &rt) != LLM_OK) return -1;
  llm_runtime_info info;
  info.struct_size = sizeof(info);
  llm_runtime_get_info(rt, &info);
  llm_runtime_destroy(rt);
  return info.kv_scale_source;
}

// FP8 KV scales from the checkpoint (self_attn.k_scale per layer) make results independent of
// which request first writes a layer; without them the scale is calibrated and reported so.
TEST_F(LayoutTest, Fp8KvScalesFromTheCheckpoint) {
  const std::string src = TestData("tiny_kimi_k2_qlora_yarn");
  std::vector<float> scales = {0.02f, 0.03f, 0.025f};  // 3 layers; |latent| and |k_rope| stay below 448 * scale
  std::vector<TensorToWrite> extra;
  for (int i = 0; i < 3; ++i) {
    extra.push_back({"model.layers." + std::to_string(i) + ".self_attn.k_scale", "F32", {}, &scales[i], 4});
  }
  const fs::path with = tmp_ / "with_scales";
  CopyCheckpoint(src, with, [](nlohmann::json&) {}, [](TensorToWrite&) { return true; });
  {
    auto file = SafetensorsFile::Open((with / "model.safetensors").string());
    ASSERT_TRUE(file.ok());
    std::vector<TensorToWrite> all;
    for (const auto& [name, info] : file->tensors()) all.push_back({name, info.dtype_name, info.shape, info.data, info.bytes});
    for (const auto& e : extra) all.push_back(e);
    ASSERT_TRUE(WriteSafetensors((tmp_ / "tmp.safetensors").string(), all).ok());
  }
  fs::rename(tmp_ / "tmp.safetensors", with / "model.safetensors");

  EXPECT_EQ(ScaleSource(with, LLM_KV_DTYPE_FP8_E4M3), LLM_KV_SCALE_CHECKPOINT);
  EXPECT_EQ(ScaleSource(src, LLM_KV_DTYPE_FP8_E4M3), LLM_KV_SCALE_CALIBRATED);
  EXPECT_EQ(ScaleSource(with, LLM_KV_DTYPE_BF16), LLM_KV_SCALE_NONE);

  // The logits of `prompt`'s greedy continuation, with or without another request prefilled
  // (and so writing every layer first) before it arrives.
  const auto prompts = GoldenPrompts("tiny_kimi_k2_qlora_yarn.golden.json");
  auto continuation = [](const std::string& dir, const std::vector<int32_t>* before, const std::vector<int32_t>& prompt) {
    llm_runtime_options ro;
    llm_runtime_options_init(&ro);
    ro.kv_dtype = LLM_KV_DTYPE_FP8_E4M3;
    llm_runtime* rt = nullptr;
    EXPECT_EQ(llm_runtime_create(dir.c_str(), &ro, &rt), LLM_OK) << llm_last_error();
    llm_sampling_options so;
    llm_sampling_options_init(&so);
    so.max_new_tokens = 6;
    std::vector<llm_step_result> res(2);
    size_t n = 0;
    llm_session* other = nullptr;
    if (before != nullptr) {
      llm_session_create(rt, &so, &other);
      llm_session_append_tokens(other, before->data(), before->size());
      llm_decode_step(rt, res.data(), res.size(), &n);  // prefills `before` alone
    }
    llm_session* s = nullptr;
    llm_session_create(rt, &so, &s);
    llm_session_append_tokens(s, prompt.data(), prompt.size());
    std::vector<float> logits, row(256);
    for (int step = 0; step < 6; ++step) {
      llm_decode_step(rt, res.data(), res.size(), &n);
      size_t count = 0;
      if (llm_session_get_logits(s, row.data(), row.size(), &count) == LLM_OK) logits.insert(logits.end(), row.begin(), row.end());
    }
    llm_session_destroy(s);
    if (other != nullptr) llm_session_destroy(other);
    llm_runtime_destroy(rt);
    return logits;
  };
  EXPECT_EQ(continuation(with.string(), nullptr, prompts[0]), continuation(with.string(), &prompts[2], prompts[0]));
  EXPECT_NE(continuation(src, nullptr, prompts[0]), continuation(src, &prompts[2], prompts[0]))
      << "calibration from the first write was expected to depend on which request came first";

  // Scales on some layers only, or not a positive scalar: refused.
  const fs::path partial = tmp_ / "partial";
  CopyCheckpoint(with.string(), partial, [](nlohmann::json&) {},
                 [](TensorToWrite& t) { return t.name != "model.layers.1.self_attn.k_scale"; });
  EXPECT_EQ(ScaleSource(partial, LLM_KV_DTYPE_FP8_E4M3), -1);
  EXPECT_NE(std::string(llm_last_error()).find("2 of 3 layers"), std::string::npos) << llm_last_error();
  float bad = -1.0f;
  const fs::path negative = tmp_ / "negative";
  CopyCheckpoint(with.string(), negative, [](nlohmann::json&) {}, [&](TensorToWrite& t) {
    if (t.name == "model.layers.2.self_attn.k_scale") t.data = &bad;
    return true;
  });
  EXPECT_EQ(ScaleSource(negative, LLM_KV_DTYPE_FP8_E4M3), -1);
  EXPECT_NE(std::string(llm_last_error()).find("positive"), std::string::npos) << llm_last_error();
}

// Every tensor of a checkpoint directory: model.safetensors, or the shards its index names.
absl::StatusOr<std::map<std::string, TensorInfo>> ReadCheckpointTensors(const std::string& dir) {
  std::vector<std::string> files;
  if (fs::exists(fs::path(dir) / "model.safetensors.index.json")) {
    std::ifstream in(fs::path(dir) / "model.safetensors.index.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    std::set<std::string> shards;
    for (const auto& [name, shard] : j.at("weight_map").items()) shards.insert(shard.get<std::string>());
    files.assign(shards.begin(), shards.end());
  } else {
    files.push_back("model.safetensors");
  }
  std::map<std::string, TensorInfo> all;
  for (const std::string& f : files) {
    auto file = SafetensorsFile::Open((fs::path(dir) / f).string());
    if (!file.ok()) return file.status();
    for (const auto& [name, info] : file->tensors()) all.emplace(name, info);
  }
  return all;
}

// Every tensor of `a` equals the same-named tensor of `b` byte for byte, and the names agree.
void ExpectSameTensors(const fs::path& a, const std::string& b) {
  auto ck_a = ReadCheckpointTensors(a.string());
  auto ck_b = ReadCheckpointTensors(b);
  ASSERT_TRUE(ck_a.ok()) << ck_a.status();
  ASSERT_TRUE(ck_b.ok()) << ck_b.status();
  ASSERT_EQ(ck_a->size(), ck_b->size());
  for (const auto& [name, ta] : *ck_a) {
    auto it = ck_b->find(name);
    ASSERT_NE(it, ck_b->end()) << name;
    const TensorInfo* tb = &it->second;
    EXPECT_EQ(ta.dtype_name, tb->dtype_name) << name;
    EXPECT_EQ(ta.shape, tb->shape) << name;
    ASSERT_EQ(ta.bytes, tb->bytes) << name;
    EXPECT_EQ(std::memcmp(ta.data, tb->data, ta.bytes), 0) << name;
  }
}

// llm-convert's converter reproduces the reference tools' checkpoints exactly: INT4 routed
// experts as compressed-tensors' pack_to_int32 packs them, FP8 blocks as torch casts them.
TEST_F(LayoutTest, ConverterWritesTheReferenceCheckpoints) {
  const std::string base = TestData("tiny_kimi_k2_quant_base");
  auto convert = [&](const std::string& in, const fs::path& out, const llm_convert_options& o) {
    char summary[256];
    const llm_status st = llm_convert_checkpoint(in.c_str(), out.c_str(), &o, summary, sizeof(summary), nullptr);
    return std::make_pair(st, std::string(st == LLM_OK ? summary : llm_last_error()));
  };
  llm_convert_options int4;
  llm_convert_options_init(&int4);
  int4.int4_group = 32;
  ASSERT_EQ(convert(base, tmp_ / "int4", int4).first, LLM_OK) << llm_last_error();
  ExpectSameTensors(tmp_ / "int4", TestData("tiny_kimi_k2_int4_g32"));
  llm_convert_options fp8;
  llm_convert_options_init(&fp8);
  fp8.target = LLM_CONVERT_FP8_BLOCK;
  fp8.fp8_block = 64;
  fp8.max_shard_bytes = 400 << 10;  // several shards and an index
  const auto [fp8_status, summary] = convert(base, tmp_ / "fp8", fp8);
  ASSERT_EQ(fp8_status, LLM_OK) << summary;
  EXPECT_NE(summary.find("shard(s)"), std::string::npos);
  EXPECT_TRUE(fs::exists(tmp_ / "fp8" / "model.safetensors.index.json"));
  ExpectSameTensors(tmp_ / "fp8", TestData("tiny_kimi_k2_fp8"));
  const auto g = LoadGolden(TestData("tiny_kimi_k2_fp8.golden.json"));
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : g) prompts.push_back(c.prompt);
  const auto out = RunBatch((tmp_ / "fp8").string(), prompts, RunConfig{});
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(out[i].tokens, g[i].generated);
  // FP8 -> INT4 (the non-expert FP8 weights become BF16, as in K2-Thinking).
  ASSERT_EQ(convert((tmp_ / "fp8").string(), tmp_ / "fp8-int4", int4).first, LLM_OK) << llm_last_error();
  llm_runtime* rt = nullptr;
  EXPECT_EQ(llm_runtime_create((tmp_ / "fp8-int4").c_str(), nullptr, &rt), LLM_OK) << llm_last_error();
  llm_runtime_destroy(rt);

  // Errors.
  llm_convert_options bad_group = int4;
  bad_group.int4_group = 48;
  EXPECT_EQ(convert(base, tmp_ / "x", bad_group).first, LLM_ERR_INVALID_ARGUMENT);
  bad_group.int4_group = 96;  // a multiple of 32 that does not divide 128 columns
  EXPECT_EQ(convert(base, tmp_ / "y", bad_group).first, LLM_ERR_FORMAT);
  EXPECT_EQ(convert(TestData("tiny_kimi_k2_int4_g32"), tmp_ / "z", int4).first, LLM_ERR_UNSUPPORTED);
  EXPECT_EQ(convert(base, tmp_ / "int4", int4).first, LLM_ERR_INVALID_ARGUMENT);  // already a checkpoint there
}

}  // namespace
}  // namespace llmrt::testing
