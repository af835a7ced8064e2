#include "src/model/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/util/errors.h"
#include "src/util/file.h"
#include "src/util/status.h"

namespace llmrt {

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  }
  Checkpoint ck;
  ck.dir_ = dir;
  LLMRT_ASSIGN_OR_RETURN(std::string cfg_text, ReadTextFile(dir + "/config.json"));
  LLMRT_ASSIGN_OR_RETURN(ck.config_, ParseModelConfig(cfg_text, dir + "/config.json"));

  std::vector<std::string> files;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (IsRegularFile(index_path)) {
    LLMRT_ASSIGN_OR_RETURN(std::string idx_text, ReadTextFile(index_path));
    auto j = nlohmann::json::parse(idx_text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return FormatError(absl::StrCat(index_path, ": missing weight_map"));
    }
    std::set<std::string> shard_names;
    std::map<std::string, std::string> expected;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) return FormatError(absl::StrCat(index_path, ": bad weight_map entry ", it.key()));
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos) {
        return FormatError(absl::StrCat(index_path, ": shard name \"", shard, "\" leaves the directory"));
      }
      shard_names.insert(shard);
      expected[it.key()] = shard;
    }
    for (const auto& shard : shard_names) {
      LLMRT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(dir + "/" + shard));
      for (const auto& [name, info] : f.tensors()) {
        auto e = expected.find(name);
        if (e == expected.end() || e->second != shard) continue;  // the index decides
        ck.tensors_.emplace(name, info);
      }
    }
    for (const auto& [name, shard] : expected) {
      if (!ck.tensors_.count(name)) {
        return FormatError(absl::StrCat(index_path, ": tensor \"", name, "\" is not in shard ", shard));
      }
    }
  } else {
    LLMRT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(dir + "/model.safetensors"));
    ck.tensors_ = f.tensors();
  }
  return ck;
}

const TensorInfo* Checkpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace llmrt
