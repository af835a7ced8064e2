#include "tests/hostile/hostile_util.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "llmrt/llmrt.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LLMRT_HOSTILE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LLMRT_HOSTILE_SANITIZED 1
#endif
#endif

namespace llmrt::hostile {

std::string RunIsolated(const std::function<std::string()>& fn, int timeout_s, uint64_t mem_cap_bytes) {
  int fds[2];
  if (::pipe(fds) != 0) return std::string("pipe failed: ") + std::strerror(errno);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return std::string("fork failed: ") + std::strerror(errno);
  if (pid == 0) {
    ::close(fds[0]);
#ifndef LLMRT_HOSTILE_SANITIZED
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(mem_cap_bytes);
    ::setrlimit(RLIMIT_AS, &rl);
#else
    (void)mem_cap_bytes;
#endif
    std::string verdict;
    try {
      verdict = fn();
    } catch (const std::exception& e) {
      verdict = std::string("exception escaped: ") + e.what();
    } catch (...) {
      verdict = "exception escaped";
    }
    size_t off = 0;
    while (off < verdict.size()) {
      const ssize_t n = ::write(fds[1], verdict.data() + off, verdict.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int wstatus = 0;
  bool done = false;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t r = ::waitpid(pid, &wstatus, WNOHANG);
    if (r == pid) {
      done = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!done) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &wstatus, 0);
    ::close(fds[0]);
    return "timed out after " + std::to_string(timeout_s) + " s";
  }
  std::string verdict;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    verdict.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (WIFSIGNALED(wstatus)) return "killed by signal " + std::to_string(WTERMSIG(wstatus));
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0) {
    return "exited with status " + std::to_string(WEXITSTATUS(wstatus)) + (verdict.empty() ? "" : ": " + verdict);
  }
  return verdict;
}

std::string MakeTempDir(const std::string& name) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("llmrt_hostile_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void CopyDir(const std::string& src, const std::string& dst) {
  std::filesystem::create_directories(dst);
  for (const auto& e : std::filesystem::directory_iterator(src)) {
    if (e.is_regular_file()) {
      std::filesystem::copy_file(e.path(), std::filesystem::path(dst) / e.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
}

std::string ExpectStatus(int32_t status, int32_t expected, const std::string& what) {
  if (status == expected) return "";
  return what + ": got " + llm_status_string(status) + " (" + llm_last_error() + "), expected " +
         llm_status_string(expected);
}

}  // namespace llmrt::hostile
