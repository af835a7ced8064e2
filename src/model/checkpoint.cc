#include "src/model/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/util/errors.h"
#include "src/util/file.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

using json = nlohmann::json;

// Nesting allowed in the parts of an index llmrt ignores ("metadata" and the like).
constexpr int kMaxIndexDepth = 16;

// The weight_map of model.safetensors.index.json: tensor name -> shard file. Streamed: the
// entries go straight into `shard_of` (names interned in `shards`), the rest of the document is
// skipped without being stored, and anything outside the schema stops the parse at once.
class IndexParser final : public nlohmann::json_sax<json> {
 public:
  explicit IndexParser(const std::string& path) : path_(path) {}

  absl::Status status() const { return status_; }
  bool saw_weight_map() const { return saw_weight_map_; }
  std::vector<std::string>& shards() { return shards_; }
  std::map<std::string, uint32_t>& shard_of() { return shard_of_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool string(string_t& v) override {
    if (!InWeightMap()) return Value();
    return Entry(v);
  }
  bool start_object(std::size_t) override { return Open(/*object=*/true); }
  bool start_array(std::size_t) override { return Open(/*object=*/false); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    if (depth_ == 1) top_key_ = k;
    if (InWeightMap()) name_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    if (status_.ok()) status_ = FormatError(absl::StrCat(path_, ": not valid JSON (error at byte ", position, ")"));
    return false;
  }

 private:
  // Directly inside the top-level "weight_map" object.
  bool InWeightMap() const { return depth_ == 2 && weight_map_open_; }
  bool Fail(std::string msg, bool limit = false) {
    status_ = limit ? absl::OutOfRangeError(msg) : FormatError(msg);
    return false;
  }
  bool Open(bool object) {
    if (depth_ == 0 && (!object || containers_ > 0)) return Fail(path_ + ": not a JSON object");
    if (InWeightMap())
      return Fail(absl::StrCat(path_, ": weight_map entry \"", absl::CHexEscape(name_), "\" is not a file name"));
    if (depth_ == 1 && top_key_ == "weight_map") {
      if (!object) return Fail(path_ + ": weight_map is not an object");
      saw_weight_map_ = true;
      weight_map_open_ = true;
    }
    ++containers_;
    if (++depth_ > kMaxIndexDepth) return Fail(absl::StrCat(path_, ": nested deeper than ", kMaxIndexDepth, " levels"));
    return true;
  }
  bool Close() {
    if (--depth_ == 1) weight_map_open_ = false;
    return true;
  }
  bool Value() {
    if (depth_ == 0) return Fail(path_ + ": not a JSON object");
    if (depth_ == 1 && top_key_ == "weight_map") return Fail(path_ + ": weight_map is not an object");
    if (InWeightMap())
      return Fail(absl::StrCat(path_, ": weight_map entry \"", absl::CHexEscape(name_), "\" is not a file name"));
    return true;
  }
  bool Entry(const std::string& shard) {
    // A shard is a file of the checkpoint directory itself.
    if (shard.empty() || shard.find('/') != std::string::npos || shard.find("..") != std::string::npos ||
        shard.find('\0') != std::string::npos) {
      return Fail(absl::StrCat(path_, ": shard name \"", absl::CHexEscape(shard), "\" leaves the directory"));
    }
    auto [it, inserted] = shard_index_.emplace(shard, static_cast<uint32_t>(shards_.size()));
    if (inserted) {
      if (static_cast<int64_t>(shards_.size()) >= kMaxShards) {
        return Fail(absl::StrCat(path_, ": more than ", kMaxShards, " shard files (llmrt's limit)"), true);
      }
      shards_.push_back(shard);
    }
    if (static_cast<int64_t>(shard_of_.size()) >= kMaxCheckpointTensors) {
      return Fail(absl::StrCat(path_, ": more than ", kMaxCheckpointTensors, " tensors (llmrt's limit)"), true);
    }
    if (!shard_of_.emplace(name_, it->second).second) {
      return Fail(absl::StrCat(path_, ": tensor \"", absl::CHexEscape(name_), "\" is listed twice in weight_map"));
    }
    return true;
  }

  const std::string& path_;
  int depth_ = 0;
  int64_t containers_ = 0;
  std::string top_key_, name_;
  bool weight_map_open_ = false, saw_weight_map_ = false;
  std::map<std::string, uint32_t> shard_index_;
  std::vector<std::string> shards_;
  std::map<std::string, uint32_t> shard_of_;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<Checkpoint> Checkpoint::OpenConfig(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  }
  Checkpoint ck;
  ck.dir_ = dir;
  LLMRT_ASSIGN_OR_RETURN(std::string cfg_text, ReadTextFile(dir + "/config.json", kMaxConfigJsonBytes));
  LLMRT_ASSIGN_OR_RETURN(ck.config_, ParseModelConfig(cfg_text, dir + "/config.json"));
  return ck;
}

absl::StatusOr<Checkpoint> Checkpoint::Synthetic(const std::string& dir, uint64_t seed) {
  LLMRT_ASSIGN_OR_RETURN(Checkpoint ck, OpenConfig(dir));
  ck.synthetic_ = true;
  ck.seed_ = seed;
  return ck;
}

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& dir) {
  LLMRT_ASSIGN_OR_RETURN(Checkpoint ck, OpenConfig(dir));

  const std::string index_path = dir + "/model.safetensors.index.json";
  absl::StatusOr<std::string> idx_text = ReadTextFile(index_path, kMaxIndexJsonBytes);
  if (absl::IsNotFound(idx_text.status())) {
    LLMRT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(dir + "/model.safetensors"));
    ck.tensors_ = f.TakeTensors();
    return ck;
  }
  if (!idx_text.ok()) return idx_text.status();  // not a regular file, unreadable, too large
  IndexParser index(index_path);
  json::sax_parse(idx_text->begin(), idx_text->end(), &index, json::input_format_t::json, /*strict=*/true);
  LLMRT_RETURN_IF_ERROR(index.status());
  if (!index.saw_weight_map()) return FormatError(absl::StrCat(index_path, ": missing weight_map"));
  idx_text->clear();
  idx_text->shrink_to_fit();
  // Shards in name order, each opened once; a shard's tensors the index assigns elsewhere (or
  // not at all) are dropped: the index decides.
  std::vector<uint32_t> order(index.shards().size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return index.shards()[a] < index.shards()[b]; });
  for (uint32_t s : order) {
    LLMRT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(dir + "/" + index.shards()[s]));
    for (auto& [name, info] : f.TakeTensors()) {
      auto e = index.shard_of().find(name);
      if (e == index.shard_of().end() || e->second != s) continue;
      ck.tensors_.emplace(name, std::move(info));
    }
  }
  for (const auto& [name, shard] : index.shard_of()) {
    if (!ck.tensors_.count(name)) {
      return FormatError(absl::StrCat(index_path, ": tensor \"", absl::CHexEscape(name), "\" is not in shard ",
                                      absl::CHexEscape(index.shards()[shard])));
    }
  }
  return ck;
}

absl::Status Checkpoint::ValidateLayerCount() const {
  if (synthetic_) return absl::OkStatus();
  const ModelConfig& c = config_;
  const std::string name = absl::StrCat(c.prefix, "layers.", c.num_layers - 1, ".input_layernorm.weight");
  if (Find(name) == nullptr) {
    return absl::NotFoundError(absl::StrCat(dir_, ": config.json declares num_hidden_layers ", c.num_layers,
                                            " but the checkpoint has no tensor \"", name, "\""));
  }
  return absl::OkStatus();
}

const TensorInfo* Checkpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace llmrt
