#include "tests/golden/safetensors_io.h"

#include <fstream>
#include <iterator>

#include "nlohmann/json.hpp"

namespace llmrt::testing {

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(path + ": cannot open");
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::istreambuf_iterator<char>(in),
                                                      std::istreambuf_iterator<char>());
  if (bytes->size() < 8) return absl::DataLossError(path + ": too short");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | (*bytes)[i];
  if (n > bytes->size() - 8) return absl::DataLossError(path + ": header length past the end");
  const nlohmann::json header = nlohmann::json::parse(bytes->begin() + 8, bytes->begin() + 8 + n, nullptr, false);
  if (!header.is_object()) return absl::DataLossError(path + ": header is not a JSON object");
  SafetensorsFile f;
  const uint8_t* data = bytes->data() + 8 + n;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    TensorInfo t;
    t.name = name;
    t.dtype_name = e.at("dtype").get<std::string>();
    t.shape = e.at("shape").get<std::vector<int64_t>>();
    const uint64_t begin = e.at("data_offsets")[0].get<uint64_t>(), end = e.at("data_offsets")[1].get<uint64_t>();
    if (begin > end || end > bytes->size() - 8 - n) return absl::DataLossError(path + ": " + name + " out of the file");
    t.data = data + begin;
    t.bytes = end - begin;
    t.file = bytes;
    f.tensors_.emplace(name, std::move(t));
  }
  return f;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::UnknownError(path + ": cannot create");
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& t : tensors) out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.bytes));
  return out ? absl::OkStatus() : absl::UnknownError(path + ": write failed");
}

}  // namespace llmrt::testing
