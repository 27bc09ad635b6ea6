// Opens a media file only if it lies under the configured media root. The path is canonicalized
// (symlinks followed, "..", "." removed) and must stay under the canonical root; the file is then
// opened with O_NOFOLLOW and checked to be the same regular file (device and inode), so a symlink
// swapped in between the check and the open cannot redirect the read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/status.h"

namespace framezip::media {

// An open, read-only file descriptor; closed on destruction. Move-only.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd();

  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

struct OpenedFile {
  ScopedFd fd;
  int64_t size_bytes = 0;
};

// `path` is relative to `root` or absolute. Errors (messages name the path as given, never the
// root): INVALID_ARGUMENT (empty path, no root configured), PERMISSION_DENIED (resolves outside the
// root), NOT_FOUND (missing), FAILED_PRECONDITION (not a regular file).
StatusOr<OpenedFile> OpenUnderRoot(const std::filesystem::path& root, const std::string& path);

}  // namespace framezip::media
