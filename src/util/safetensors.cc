#include "src/util/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/escaping.h"
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
  auto f = Map(fd, file_size, path);
  ::close(fd);
  return f;
}

absl::StatusOr<std::shared_ptr<MappedFile>> MappedFile::Map(int fd, uint64_t size, const std::string& path) {
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  if (size > std::numeric_limits<size_t>::max()) return IoError(absl::StrCat(path, ": too large to map"));
  f->size_ = static_cast<size_t>(size);
  if (f->size_ > 0) {
    // MAP_POPULATE maps every page up front: decode then never stalls on first-touch faults of
    // experts it had not used yet.
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      return IoError(absl::StrCat(path, ": cannot mmap: ", std::strerror(e)));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
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

namespace {

// Streams a safetensors header into TensorInfo entries (offsets relative to the file; no data
// pointers yet), accepting only the schema: a top-level object whose values are tensor entries
// {"dtype": string, "shape": [uint...], "data_offsets": [uint, uint]} (other scalar fields are
// ignored) or "__metadata__", an object of strings. Anything else stops the parse at once, so
// neither nesting nor width can cost more than the entries that are kept.
class HeaderParser final : public nlohmann::json_sax<json> {
 public:
  HeaderParser(const std::string& path, uint64_t data_begin, uint64_t data_size)
      : path_(path), data_begin_(data_begin), data_size_(data_size) {}

  absl::Status status() const { return status_; }
  std::map<std::string, TensorInfo>& tensors() { return tensors_; }

  bool null() override { return Scalar(); }
  bool boolean(bool) override { return Scalar(); }
  bool number_integer(number_integer_t) override {  // negative: nlohmann reports >= 0 as unsigned
    if (state_ == State::kShape) return Fail(Where() + ": bad shape");
    if (state_ == State::kOffsets) return Fail(Where() + ": bad data_offsets");
    return Scalar();
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ == State::kShape) return Dim(v);
    if (state_ == State::kOffsets) {
      if (entry_.num_offsets >= 2) return Fail(Where() + ": malformed header entry");
      entry_.offsets[entry_.num_offsets++] = v;
      return true;
    }
    return Scalar();
  }
  bool number_float(number_float_t, const string_t&) override {
    if (state_ == State::kShape) return Fail(Where() + ": bad shape");
    if (state_ == State::kOffsets) return Fail(Where() + ": bad data_offsets");
    return Scalar();
  }
  bool string(string_t& v) override {
    if (state_ == State::kEntry && key_ == "dtype") {
      entry_.has_dtype = true;
      entry_.dtype = std::move(v);
      return true;
    }
    if (state_ == State::kMetadata) return true;
    return Scalar();
  }
  bool binary(binary_t&) override { return Scalar(); }

  bool start_object(std::size_t) override {
    if (state_ == State::kStart) {
      state_ = State::kTop;
      return true;
    }
    if (state_ != State::kTop) return Nested();
    if (name_ == "__metadata__") {
      state_ = State::kMetadata;
      return true;
    }
    if (static_cast<int64_t>(tensors_.size()) >= kMaxCheckpointTensors) {
      return Fail(absl::StrCat(path_, ": more than ", kMaxCheckpointTensors, " tensors (llmrt's limit)"),
                  /*limit=*/true);
    }
    if (tensors_.count(name_)) return Fail(Where() + ": listed twice in the header");
    state_ = State::kEntry;
    entry_ = Entry();
    return true;
  }
  bool key(string_t& k) override {
    if (state_ == State::kTop) {
      name_ = std::move(k);
      return true;
    }
    if (state_ == State::kEntry) {
      key_ = std::move(k);
      if ((key_ == "dtype" && entry_.has_dtype) || (key_ == "shape" && entry_.has_shape) ||
          (key_ == "data_offsets" && entry_.has_offsets)) {
        return Fail(Where() + ": malformed header entry (\"" + key_ + "\" twice)");
      }
      return true;
    }
    return true;  // __metadata__
  }
  bool end_object() override {
    switch (state_) {
      case State::kTop:
        state_ = State::kDone;
        return true;
      case State::kMetadata:
        state_ = State::kTop;
        return true;
      case State::kEntry:
        state_ = State::kTop;
        return Finish();
      default:
        return Fail(path_ + ": malformed header");
    }
  }
  bool start_array(std::size_t) override {
    if (state_ == State::kEntry && key_ == "shape") {
      entry_.has_shape = true;
      entry_.numel = 1;
      state_ = State::kShape;
      return true;
    }
    if (state_ == State::kEntry && key_ == "data_offsets") {
      entry_.has_offsets = true;
      state_ = State::kOffsets;
      return true;
    }
    return Nested();
  }
  bool end_array() override {
    if (state_ == State::kShape || state_ == State::kOffsets) {
      state_ = State::kEntry;
      return true;
    }
    return Fail(path_ + ": malformed header");
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    if (status_.ok()) {
      status_ = FormatError(absl::StrCat(path_, ": header is not a valid JSON object (error at byte ", position, ")"));
    }
    return false;
  }

 private:
  enum class State { kStart, kTop, kEntry, kShape, kOffsets, kMetadata, kDone };
  struct Entry {
    bool has_dtype = false, has_shape = false, has_offsets = false;
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t numel = 1;  // of the non-zero dimensions
    bool empty = false;  // a zero dimension
    uint64_t offsets[2] = {0, 0};
    int num_offsets = 0;
  };

  // Names come from the file: escaped, so that a NUL or a control character cannot hide the rest.
  std::string Where() const { return absl::StrCat(path_, ": tensor \"", absl::CHexEscape(name_), "\""); }
  bool Fail(std::string msg, bool limit = false) {
    status_ = limit ? absl::OutOfRangeError(msg) : FormatError(msg);
    return false;
  }
  // A value the schema has no place for, at the current position.
  bool Scalar() {
    switch (state_) {
      case State::kStart:
        return Fail(path_ + ": header is not a valid JSON object");
      case State::kTop:
        return Fail(name_ == "__metadata__" ? path_ + ": __metadata__ must be an object of strings"
                                            : Where() + ": malformed header entry");
      case State::kMetadata:
        return Fail(path_ + ": __metadata__ must be an object of strings");
      case State::kEntry:
        // An unknown field with a scalar value is ignored (as the reference ignores it); the
        // three known fields have fixed types.
        if (key_ == "dtype" || key_ == "shape" || key_ == "data_offsets")
          return Fail(Where() + ": malformed header entry");
        return true;
      case State::kShape:
        return Fail(Where() + ": bad shape");
      case State::kOffsets:
        return Fail(Where() + ": bad data_offsets");
      case State::kDone:
        return Fail(path_ + ": malformed header");
    }
    return false;
  }
  // An object or array where the schema has none: nothing nests below an entry's fields.
  bool Nested() { return state_ == State::kEntry ? Fail(Where() + ": malformed header entry") : Scalar(); }
  bool Dim(uint64_t d) {
    if (entry_.shape.size() >= static_cast<size_t>(kMaxTensorRank)) {
      return Fail(absl::StrCat(Where(), ": more than ", kMaxTensorRank, " dimensions (llmrt's limit)"), true);
    }
    // Every dimension and the product of the non-zero ones stay below 2^48, so no product of
    // dimensions any later code forms can overflow, even for tensors with a zero dimension.
    if (d > kMaxTensorElements || (d != 0 && entry_.numel > kMaxTensorElements / d)) {
      return Fail(Where() + ": shape too large", true);
    }
    if (d == 0) {
      entry_.empty = true;
    } else {
      entry_.numel *= d;
    }
    entry_.shape.push_back(static_cast<int64_t>(d));
    return true;
  }
  bool Finish() {
    Entry& e = entry_;
    if (!e.has_dtype || !e.has_shape || !e.has_offsets || e.num_offsets != 2) {
      return Fail(Where() + ": malformed header entry");
    }
    TensorInfo info;
    info.name = name_;
    info.dtype_name = std::move(e.dtype);
    size_t es = 0;
    info.dtype = ParseSafetensorsDType(info.dtype_name, &es);
    if (es == 0) return Fail(absl::StrCat(Where(), ": unknown dtype \"", absl::CHexEscape(info.dtype_name), "\""));
    const uint64_t numel = e.empty ? 0 : e.numel;
    const uint64_t begin = e.offsets[0], end = e.offsets[1];
    if (begin > end || end > data_size_) {
      return Fail(absl::StrCat(Where(), ": data_offsets [", begin, ", ", end, ") outside the ", data_size_,
                               "-byte data section (truncated file?)"));
    }
    if (end - begin != numel * es) {
      return Fail(absl::StrCat(Where(), ": ", end - begin, " bytes for ", numel, " ", info.dtype_name, " elements"));
    }
    info.file_offset = data_begin_ + begin;
    // Kernels read tensors through typed pointers; the mapping is page-aligned, so the offset
    // decides. The safetensors library writes every tensor aligned (header padded to 8 bytes,
    // larger elements first); tensors of dtypes llmrt never reads are not checked.
    if (info.dtype.has_value() && es > 1 && info.file_offset % es != 0) {
      status_ = UnsupportedError(absl::StrCat(Where(), ": data at file offset ", info.file_offset,
                                              " is not aligned to its ", es,
                                              "-byte elements; rewrite the file "
                                              "with the safetensors library"));
      return false;
    }
    info.shape = std::move(e.shape);
    info.bytes = static_cast<size_t>(end - begin);
    tensors_.emplace(info.name, std::move(info));
    return true;
  }

  const std::string& path_;
  const uint64_t data_begin_, data_size_;
  State state_ = State::kStart;
  std::string name_, key_;
  Entry entry_;
  std::map<std::string, TensorInfo> tensors_;
  absl::Status status_;
};

// Reads exactly n bytes at offset `at` of fd into *out.
absl::Status ReadAt(int fd, uint64_t at, size_t n, std::string* out, const std::string& path) {
  out->resize(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out->data() + got, n - got, static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return IoError(
          absl::StrCat(path, ": read failed", r < 0 ? absl::StrCat(": ", std::strerror(errno)) : " (short file)"));
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  uint64_t size = 0;
  LLMRT_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &size));
  // Closes fd on every return; the mapping keeps its own reference to the file.
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (size < 8) return FormatError(absl::StrCat(path, ": truncated: ", size, " bytes, no header length"));
  std::string buf;
  LLMRT_RETURN_IF_ERROR(ReadAt(fd, 0, 8, &buf, path));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(buf[i]);
  if (header_len > size - 8) {
    return FormatError(absl::StrCat(path, ": header length ", header_len, " exceeds the file (", size,
                                    " bytes): truncated or not a safetensors file"));
  }
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return absl::OutOfRangeError(absl::StrCat(path, ": header length ", header_len, " is above the ",
                                              kMaxSafetensorsHeaderBytes, "-byte limit"));
  }
  // The header is read and validated before anything is mapped: a large file that is not a
  // checkpoint costs one bounded read, not the population of its whole mapping.
  LLMRT_RETURN_IF_ERROR(ReadAt(fd, 8, static_cast<size_t>(header_len), &buf, path));
  HeaderParser parser(path, 8 + header_len, size - 8 - header_len);
  const bool ok = json::sax_parse(buf.begin(), buf.end(), &parser, json::input_format_t::json, /*strict=*/true);
  if (!parser.status().ok()) return parser.status();
  if (!ok) return FormatError(absl::StrCat(path, ": header is not a valid JSON object"));
  buf.clear();
  buf.shrink_to_fit();
  SafetensorsFile st;
  LLMRT_ASSIGN_OR_RETURN(st.file_, MappedFile::Map(fd, size, path));
  st.tensors_ = std::move(parser.tensors());
  for (auto& [name, info] : st.tensors_) {
    info.data = st.file_->data() + info.file_offset;
    info.file = st.file_;
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
