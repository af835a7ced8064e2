#include "src/convert/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/model/checkpoint.h"
#include "src/quant/fp8.h"
#include "src/quant/weight_quant.h"
#include "src/util/bf16.h"
#include "src/util/errors.h"
#include "src/util/file.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Which decoder-layer matrices the target quantizes (norms and biases are vectors; embeddings
// and lm_head live outside the layers and stay BF16, as in the released checkpoints).
bool Quantizes(const ConvertOptions& o, const ModelConfig& c, const std::string& name, const TensorInfo& t) {
  if (t.shape.size() != 2 || !EndsWith(name, "weight")) return false;
  if (name.compare(0, c.prefix.size() + 7, c.prefix + "layers.") != 0) return false;
  if (EndsWith(name, "mlp.gate.weight") || name.find(".indexer.weights_proj.") != std::string::npos) return false;
  if (o.target == ConvertOptions::Target::kFp8Block) return true;
  if (!o.int4_all_linears) return name.find(".mlp.experts.") != std::string::npos;
  return name.find("kv_b_proj") == std::string::npos && name.find(".indexer.") == std::string::npos;
}

// The float32 values of checkpoint matrix `name` (BF16, F32 or FP8 with block scales).
absl::Status ReadMatrix(const Checkpoint& ck, const std::string& name, const TensorInfo& t, std::vector<float>* out) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  out->resize(static_cast<size_t>(rows * cols));
  if (t.dtype == DType::kBF16) {
    Bf16ToF32Array(reinterpret_cast<const uint16_t*>(t.data), out->data(), rows * cols);
  } else if (t.dtype == DType::kF32) {
    std::memcpy(out->data(), t.data, out->size() * sizeof(float));
  } else if (t.dtype == DType::kF8E4M3) {
    const QuantConfig& q = ck.config().quant;
    const TensorInfo* s = ck.Find(name + "_scale_inv");
    if (q.method != QuantConfig::Method::kFp8Block || s == nullptr || s->dtype != DType::kF32) {
      return FormatError(absl::StrCat(ck.dir(), ": FP8 tensor \"", name, "\" without fp8 block scales"));
    }
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeFp8BlockRow(t.data, reinterpret_cast<const float*>(s->data), cols, q.block_rows, q.block_cols, r,
                            out->data() + r * cols);
    }
  } else {
    return UnsupportedError(absl::StrCat(ck.dir(), ": cannot convert tensor \"", name, "\" of dtype ", t.dtype_name));
  }
  return absl::OkStatus();
}

// An output tensor whose bytes are computed when the writer first asks for them.
struct Lazy {
  std::function<absl::StatusOr<std::vector<uint8_t>>()> make;
  std::shared_ptr<std::vector<uint8_t>> bytes;
  absl::Status status;
};

TensorToWrite LazyTensor(std::string name, std::string dtype, std::vector<int64_t> shape, size_t nbytes,
                         std::shared_ptr<Lazy> lazy) {
  TensorToWrite t;
  t.name = std::move(name);
  t.dtype = std::move(dtype);
  t.shape = std::move(shape);
  t.bytes = nbytes;
  t.fill = [lazy, nbytes](uint8_t* dst, size_t begin, size_t n) {
    if (lazy->bytes == nullptr && lazy->status.ok()) {
      absl::StatusOr<std::vector<uint8_t>> b = lazy->make();
      if (b.ok() && b->size() == nbytes) {
        lazy->bytes = std::make_shared<std::vector<uint8_t>>(std::move(*b));
      } else {
        lazy->status = b.ok() ? absl::InternalError("converted tensor has the wrong size") : b.status();
      }
    }
    if (lazy->bytes == nullptr) {
      std::memset(dst, 0, n);
      return;
    }
    std::memcpy(dst, lazy->bytes->data() + begin, n);
    if (begin + n == nbytes) lazy->bytes.reset();  // done: free before the next tensor
  };
  return t;
}

}  // namespace

absl::Status ConvertCheckpoint(const std::string& in_dir, const std::string& out_dir, const ConvertOptions& o,
                               std::string* summary) {
  if (o.target == ConvertOptions::Target::kFp8Block && o.fp8_block <= 0) {
    return absl::InvalidArgumentError("fp8 block size must be positive");
  }
  if (o.target == ConvertOptions::Target::kInt4 && (o.int4_group <= 0 || o.int4_group % 32 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("INT4 group size ", o.int4_group, " is not a multiple of 32"));
  }
  LLMRT_ASSIGN_OR_RETURN(Checkpoint ck, Checkpoint::Open(in_dir));
  const ModelConfig& c = ck.config();
  if (c.quant.method == QuantConfig::Method::kCompressedInt4) {
    return UnsupportedError(absl::StrCat(in_dir, ": the checkpoint is already INT4 (compressed-tensors)"));
  }
  std::error_code ec;
  if (fs::exists(fs::path(out_dir) / "config.json", ec)) {
    return absl::InvalidArgumentError(absl::StrCat(out_dir, " already holds a checkpoint"));
  }
  fs::create_directories(out_dir, ec);
  if (ec) return IoError(absl::StrCat(out_dir, ": ", ec.message()));

  std::vector<TensorToWrite> out;
  std::vector<std::shared_ptr<Lazy>> lazies;
  uint64_t quantized = 0, quantized_bytes = 0, kept = 0, kept_bytes = 0;
  for (const auto& [name, t] : ck.tensors()) {
    if (EndsWith(name, "_scale_inv") && ck.Find(name.substr(0, name.size() - 10)) != nullptr) continue;
    if (Quantizes(o, c, name, t)) {
      const int64_t rows = t.shape[0], cols = t.shape[1];
      const Checkpoint* ckp = &ck;
      const TensorInfo* tp = &t;
      const std::string src = name;
      if (o.target == ConvertOptions::Target::kFp8Block) {
        const int64_t B = o.fp8_block, nr = (rows + B - 1) / B, nc = (cols + B - 1) / B;
        auto scales = std::make_shared<std::vector<float>>();
        auto codes = std::make_shared<Lazy>();
        codes->make = [=]() -> absl::StatusOr<std::vector<uint8_t>> {
          std::vector<float> w;
          LLMRT_RETURN_IF_ERROR(ReadMatrix(*ckp, src, *tp, &w));
          std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
          scales->assign(static_cast<size_t>(nr * nc), 0.0f);
          for (int64_t bi = 0; bi < nr; ++bi) {
            for (int64_t bj = 0; bj < nc; ++bj) {
              float amax = 0.0f;
              for (int64_t r = bi * B; r < std::min(rows, (bi + 1) * B); ++r) {
                for (int64_t k = bj * B; k < std::min(cols, (bj + 1) * B); ++k) amax = std::max(amax, std::fabs(w[r * cols + k]));
              }
              const float s = std::max(amax, 1e-12f) / Fp8E4M3::kMax;
              (*scales)[bi * nc + bj] = s;
              for (int64_t r = bi * B; r < std::min(rows, (bi + 1) * B); ++r) {
                for (int64_t k = bj * B; k < std::min(cols, (bj + 1) * B); ++k) q[r * cols + k] = Fp8E4M3::FromFloat(w[r * cols + k] / s);
              }
            }
          }
          return q;
        };
        auto scale_bytes = std::make_shared<Lazy>();
        scale_bytes->make = [=]() -> absl::StatusOr<std::vector<uint8_t>> {
          if (scales->empty()) return absl::InternalError("scales requested before codes");
          std::vector<uint8_t> b(scales->size() * sizeof(float));
          std::memcpy(b.data(), scales->data(), b.size());
          return b;
        };
        out.push_back(LazyTensor(name, "F8_E4M3", {rows, cols}, static_cast<size_t>(rows * cols), codes));
        out.push_back(LazyTensor(name + "_scale_inv", "F32", {nr, nc}, static_cast<size_t>(nr * nc * 4), scale_bytes));
        lazies.push_back(codes);
        lazies.push_back(scale_bytes);
        quantized_bytes += static_cast<uint64_t>(rows * cols + nr * nc * 4);
      } else {
        const int64_t G = o.int4_group;
        if (cols % G != 0 || cols % 8 != 0) {
          return FormatError(absl::StrCat(in_dir, ": INT4 group size ", G, " does not divide the ", cols,
                                          " columns of \"", name, "\""));
        }
        const std::string stem = name.substr(0, name.size() - 6);
        auto scales = std::make_shared<std::vector<uint16_t>>();
        auto packed = std::make_shared<Lazy>();
        packed->make = [=]() -> absl::StatusOr<std::vector<uint8_t>> {
          std::vector<float> w;
          LLMRT_RETURN_IF_ERROR(ReadMatrix(*ckp, src, *tp, &w));
          std::vector<uint8_t> p(static_cast<size_t>(rows * cols / 2), 0);
          scales->assign(static_cast<size_t>(rows * (cols / G)), 0);
          for (int64_t r = 0; r < rows; ++r) {
            QuantizeInt4Row(w.data() + r * cols, cols, G, p.data() + r * (cols / 2), scales->data() + r * (cols / G));
          }
          return p;  // little-endian: eight codes per int32, column 8j+i in bits 4i..4i+3
        };
        auto scale_bytes = std::make_shared<Lazy>();
        scale_bytes->make = [=]() -> absl::StatusOr<std::vector<uint8_t>> {
          if (scales->empty()) return absl::InternalError("scales requested before codes");
          std::vector<uint8_t> b(scales->size() * sizeof(uint16_t));
          std::memcpy(b.data(), scales->data(), b.size());
          return b;
        };
        auto shape = std::make_shared<Lazy>();
        shape->make = [=]() -> absl::StatusOr<std::vector<uint8_t>> {
          const int32_t dims[2] = {static_cast<int32_t>(rows), static_cast<int32_t>(cols)};
          std::vector<uint8_t> b(8);
          std::memcpy(b.data(), dims, 8);
          return b;
        };
        out.push_back(LazyTensor(stem + "weight_packed", "I32", {rows, cols / 8}, static_cast<size_t>(rows * cols / 2), packed));
        out.push_back(LazyTensor(stem + "weight_scale", "BF16", {rows, cols / G}, static_cast<size_t>(rows * (cols / G) * 2),
                                 scale_bytes));
        out.push_back(LazyTensor(stem + "weight_shape", "I32", {2}, 8, shape));
        lazies.insert(lazies.end(), {packed, scale_bytes, shape});
        quantized_bytes += static_cast<uint64_t>(rows * cols / 2 + rows * (cols / G) * 2 + 8);
      }
      ++quantized;
      continue;
    }
    // Kept: F32 and BF16 as they are; FP8 matrices not quantized by this target become BF16.
    if (t.dtype == DType::kF8E4M3) {
      const Checkpoint* ckp = &ck;
      const TensorInfo* tp = &t;
      const std::string src = name;
      auto bf16 = std::make_shared<Lazy>();
      bf16->make = [=]() -> absl::StatusOr<std::vector<uint8_t>> {
        std::vector<float> w;
        LLMRT_RETURN_IF_ERROR(ReadMatrix(*ckp, src, *tp, &w));
        std::vector<uint8_t> b(w.size() * 2);
        F32ToBf16Array(w.data(), reinterpret_cast<uint16_t*>(b.data()), static_cast<int64_t>(w.size()));
        return b;
      };
      out.push_back(LazyTensor(name, "BF16", t.shape, static_cast<size_t>(t.numel() * 2), bf16));
      lazies.push_back(bf16);
      kept_bytes += static_cast<uint64_t>(t.numel() * 2);
    } else {
      out.push_back({name, t.dtype_name, t.shape, t.data, t.bytes});
      kept_bytes += t.bytes;
    }
    ++kept;
  }

  // Shards of at most max_shard_bytes (a tensor larger than that gets a shard of its own).
  std::vector<std::vector<TensorToWrite>> shards(1);
  uint64_t in_shard = 0;
  for (auto& t : out) {
    if (!shards.back().empty() && in_shard + t.bytes > o.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    in_shard += t.bytes;
    shards.back().push_back(std::move(t));
  }
  json index = {{"metadata", {{"total_size", quantized_bytes + kept_bytes}}}, {"weight_map", json::object()}};
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    const std::string file = shards.size() == 1 ? "model.safetensors" : name;
    LLMRT_RETURN_IF_ERROR(WriteSafetensors((fs::path(out_dir) / file).string(), shards[i]));
    for (const auto& t : shards[i]) index["weight_map"][t.name] = file;
  }
  for (const auto& l : lazies) LLMRT_RETURN_IF_ERROR(l->status);
  if (shards.size() > 1) std::ofstream(fs::path(out_dir) / "model.safetensors.index.json") << index.dump(2);

  // config.json with the target's quantization_config; other files copied.
  LLMRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(in_dir + "/config.json"));
  json cfg = json::parse(text, nullptr, false);
  if (!cfg.is_object()) return FormatError(in_dir + "/config.json: not a JSON object");
  json& qc = cfg.contains("text_config") && cfg["text_config"].contains("quantization_config") ? cfg["text_config"] : cfg;
  if (o.target == ConvertOptions::Target::kFp8Block) {
    qc["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                 {"weight_block_size", {o.fp8_block, o.fp8_block}}};
  } else {
    json ignore = {"lm_head", "re:.*mlp\\.gate$"};
    if (!o.int4_all_linears) {
      for (const char* r : {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|down)_proj.*"}) {
        ignore.push_back(r);
      }
    } else {
      ignore.push_back("re:.*kv_b_proj.*");
      ignore.push_back("re:.*indexer.*");
    }
    qc["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "pack-quantized"},
        {"quantization_status", "compressed"},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"input_activations", nullptr},
            {"output_activations", nullptr},
            {"weights",
             {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", o.int4_group},
              {"dynamic", false}, {"actorder", nullptr}, {"observer", "minmax"}}}}}}},
        {"ignore", ignore},
        {"kv_cache_scheme", nullptr}};
  }
  std::ofstream(fs::path(out_dir) / "config.json") << cfg.dump(2);
  for (const auto& e : fs::directory_iterator(in_dir, ec)) {
    const std::string f = e.path().filename().string();
    if (!e.is_regular_file() || f == "config.json" || EndsWith(f, ".safetensors") ||
        f == "model.safetensors.index.json") {
      continue;
    }
    fs::copy_file(e.path(), fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) return IoError(absl::StrCat(f, ": ", ec.message()));
  }
  if (summary != nullptr) {
    *summary = absl::StrCat(quantized, " matrices quantized (", quantized_bytes, " bytes), ", kept,
                            " tensors kept (", kept_bytes, " bytes), ", shards.size(), " shard(s)");
  }
  return absl::OkStatus();
}

}  // namespace llmrt
