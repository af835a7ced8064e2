// Helpers for the hostile-input suite: every case runs in a forked child with a wall-clock limit
// and (outside sanitizer builds) an address-space cap, so a hang, a crash or an unbounded
// allocation fails that case with a message instead of taking the suite down.
#ifndef LLMRT_TESTS_HOSTILE_HOSTILE_UTIL_H_
#define LLMRT_TESTS_HOSTILE_HOSTILE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace llmrt::hostile {

// Runs fn in a child process. Returns "" when fn returned "" (the case passed), else fn's
// message, "timed out after N s", "killed by signal S" or "exited with status N".
// mem_cap_bytes caps the child's address space (ignored under ASan/TSan, whose shadow memory
// needs more; there ASAN_OPTIONS=max_allocation_size_mb plays that role).
std::string RunIsolated(const std::function<std::string()>& fn, int timeout_s = 30,
                        uint64_t mem_cap_bytes = uint64_t{3} << 30);

// A new empty directory under the system temp directory.
std::string MakeTempDir(const std::string& name);
void WriteFile(const std::string& path, const std::string& bytes);
std::string ReadFile(const std::string& path);
// Copies the regular files of src into dst (created if needed).
void CopyDir(const std::string& src, const std::string& dst);

// "" when status == expected, else a message naming both and llm_last_error().
std::string ExpectStatus(int32_t status, int32_t expected, const std::string& what);

}  // namespace llmrt::hostile

#endif  // LLMRT_TESTS_HOSTILE_HOSTILE_UTIL_H_
