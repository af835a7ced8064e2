// Files llmrt reads from a model directory. Only regular files are opened: a FIFO, socket or
// device named like a model file would block the host or never end. Symbolic links are followed
// (the Hugging Face cache stores shards as links into its blob store). Text files are read with
// a size limit, so a hostile directory cannot make the host allocate without bound.
#ifndef LLMRT_UTIL_FILE_H_
#define LLMRT_UTIL_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace llmrt {

// The largest text file llmrt reads (config.json, tokenizer files, shard indexes): 128 MiB,
// several times the largest released tokenizer.json.
inline constexpr size_t kMaxTextFileBytes = size_t{128} << 20;

// True when `path` names a regular file (after following links).
bool IsRegularFile(const std::string& path);

// Opens `path` read-only without blocking and checks, on the open descriptor, that it is a
// regular file. Returns the descriptor (the caller closes it) and its size in *size.
// NotFound when absent; IoError when it cannot be opened or is not a regular file.
absl::StatusOr<int> OpenRegularFile(const std::string& path, uint64_t* size);

// Reads a whole regular file of at most max_bytes. NotFound when absent; IoError when it cannot
// be read or is not a regular file; OutOfRange when it is larger than max_bytes.
absl::StatusOr<std::string> ReadTextFile(const std::string& path, size_t max_bytes = kMaxTextFileBytes);

}  // namespace llmrt

#endif  // LLMRT_UTIL_FILE_H_
