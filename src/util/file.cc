#include "src/util/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/util/errors.h"

namespace llmrt {

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::StatusOr<int> OpenRegularFile(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return IoError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return IoError(absl::StrCat(path, ": cannot stat: ", std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError(absl::StrCat(path, ": not a regular file"));
  }
  // Regular files never block; clear the flag so reads behave as usual.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path, size_t max_bytes) {
  uint64_t size = 0;
  absl::StatusOr<int> fd = OpenRegularFile(path, &size);
  if (!fd.ok()) return fd.status();
  if (size > max_bytes) {
    ::close(*fd);
    return absl::OutOfRangeError(
        absl::StrCat(path, ": ", size, " bytes is larger than the ", max_bytes, "-byte limit for text files"));
  }
  std::string text(static_cast<size_t>(size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(*fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(*fd);
      return IoError(absl::StrCat(path, ": read failed", n < 0 ? absl::StrCat(": ", std::strerror(e)) : " (short file)"));
    }
    got += static_cast<size_t>(n);
  }
  ::close(*fd);
  return text;
}

}  // namespace llmrt
