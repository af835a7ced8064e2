#include "src/util/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/util/errors.h"
#include "src/util/file.h"
#include "src/util/status.h"

namespace llmrt {

using json = nlohmann::json;

absl::StatusOr<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  uint64_t file_size = 0;
  LLMRT_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &file_size));
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(file_size);
  if (f->size_ > 0) {
    // MAP_POPULATE maps every page up front: decode then never stalls on first-touch faults of
    // experts it had not used yet.
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return IoError(absl::StrCat(path, ": cannot mmap: ", std::strerror(e)));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::optional<DType> ParseSafetensorsDType(const std::string& s, size_t* element_size) {
  struct Entry {
    const char* name;
    size_t size;
    std::optional<DType> dtype;
  };
  static const Entry kTable[] = {
      {"F64", 8, std::nullopt},       {"F32", 4, DType::kF32},     {"F16", 2, DType::kF16},
      {"BF16", 2, DType::kBF16},      {"F8_E4M3", 1, DType::kF8E4M3}, {"F8_E5M2", 1, std::nullopt},
      {"I64", 8, DType::kI64},        {"I32", 4, DType::kI32},     {"I16", 2, std::nullopt},
      {"I8", 1, DType::kI8},          {"U8", 1, DType::kU8},       {"U16", 2, std::nullopt},
      {"U32", 4, std::nullopt},       {"U64", 8, std::nullopt},    {"BOOL", 1, std::nullopt},
  };
  for (const auto& e : kTable) {
    if (s == e.name) {
      *element_size = e.size;
      return e.dtype;
    }
  }
  *element_size = 0;
  return std::nullopt;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile st;
  LLMRT_ASSIGN_OR_RETURN(st.file_, MappedFile::Open(path));
  const uint8_t* base = st.file_->data();
  const size_t size = st.file_->size();
  if (size < 8) return FormatError(absl::StrCat(path, ": truncated: ", size, " bytes, no header length"));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  if (header_len > size - 8 || header_len > (100u << 20)) {
    return FormatError(absl::StrCat(path, ": header length ", header_len, " exceeds the file (", size,
                                    " bytes): truncated or not a safetensors file"));
  }
  const char* hdr = reinterpret_cast<const char*>(base + 8);
  json j = json::parse(hdr, hdr + header_len, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return FormatError(absl::StrCat(path, ": header is not a valid JSON object"));
  }
  const uint8_t* data = base + 8 + header_len;
  const size_t data_size = size - 8 - header_len;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& e = it.value();
    const std::string where = absl::StrCat(path, ": tensor \"", it.key(), "\"");
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return FormatError(absl::StrCat(where, ": malformed header entry"));
    }
    TensorInfo info;
    info.name = it.key();
    info.dtype_name = e["dtype"].get<std::string>();
    size_t es = 0;
    info.dtype = ParseSafetensorsDType(info.dtype_name, &es);
    if (es == 0) return FormatError(absl::StrCat(where, ": unknown dtype \"", info.dtype_name, "\""));
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return FormatError(absl::StrCat(where, ": bad shape"));
      }
      info.shape.push_back(d.get<int64_t>());
      if (d.get<uint64_t>() != 0 && numel > (uint64_t{1} << 48) / d.get<uint64_t>()) {
        return FormatError(absl::StrCat(where, ": shape too large"));
      }
      numel *= d.get<uint64_t>();
    }
    const auto& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return FormatError(absl::StrCat(where, ": bad data_offsets"));
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return FormatError(absl::StrCat(where, ": data_offsets [", begin, ", ", end, ") outside the ",
                                      data_size, "-byte data section (truncated file?)"));
    }
    if (end - begin != numel * es) {
      return FormatError(absl::StrCat(where, ": ", end - begin, " bytes for ", numel, " ",
                                      info.dtype_name, " elements"));
    }
    info.data = data + begin;
    info.bytes = end - begin;
    info.file = st.file_;
    st.tensors_.emplace(info.name, std::move(info));
  }
  return st;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return IoError(absl::StrCat(path, ": cannot create"));
  uint64_t n = h.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  std::vector<uint8_t> chunk;
  for (const auto& t : tensors) {
    if (t.data != nullptr || !t.fill) {
      out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.bytes));
      continue;
    }
    constexpr size_t kChunk = 8u << 20;
    chunk.resize(std::min(kChunk, t.bytes));
    for (size_t begin = 0; begin < t.bytes; begin += kChunk) {
      const size_t n = std::min(kChunk, t.bytes - begin);
      t.fill(chunk.data(), begin, n);
      out.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(n));
    }
  }
  if (!out) return IoError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace llmrt
