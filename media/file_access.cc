#include "media/file_access.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace framezip::media {

namespace fs = std::filesystem;

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// True when `path` equals `root` or lies below it (both canonical).
bool IsUnder(const fs::path& path, const fs::path& root) {
  auto r = root.begin();
  auto p = path.begin();
  for (; r != root.end(); ++r, ++p) {
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

}  // namespace

StatusOr<OpenedFile> OpenUnderRoot(const fs::path& root, const std::string& path) {
  if (root.empty())
    return InvalidArgumentError("no media root is configured: files cannot be read");
  if (path.empty()) return InvalidArgumentError("empty media path");
  if (path.find('\0') != std::string::npos) return InvalidArgumentError("media path contains NUL");

  std::error_code ec;
  const fs::path canonical_root = fs::canonical(root, ec);
  if (ec) return FailedPreconditionError("the media root cannot be resolved: {}", ec.message());

  const fs::path requested(path);
  const fs::path joined = requested.is_absolute() ? requested : canonical_root / requested;
  // weakly_canonical resolves every existing component (following symlinks), so a missing file is
  // still checked against the root before we say "not found" (no probing outside the root).
  const fs::path resolved = fs::weakly_canonical(joined, ec);
  if (ec) return NotFoundError("media file '{}' cannot be resolved: {}", path, ec.message());
  if (!IsUnder(resolved, canonical_root) || resolved == canonical_root) {
    return PermissionDeniedError("media path '{}' is outside the media root", path);
  }

  struct stat before {};
  if (::stat(resolved.c_str(), &before) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return NotFoundError("media file '{}' not found", path);
    return PermissionDeniedError("media file '{}' cannot be read: {}", path,
                                 std::error_code(errno, std::generic_category()).message());
  }
  if (!S_ISREG(before.st_mode)) {
    return FailedPreconditionError("media path '{}' is not a regular file", path);
  }

  ScopedFd fd(::open(resolved.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    return PermissionDeniedError("media file '{}' cannot be opened: {}", path,
                                 std::error_code(errno, std::generic_category()).message());
  }
  struct stat after {};
  if (::fstat(fd.get(), &after) != 0 || after.st_dev != before.st_dev ||
      after.st_ino != before.st_ino || !S_ISREG(after.st_mode)) {
    return PermissionDeniedError("media file '{}' changed while being opened", path);
  }
  OpenedFile out;
  out.fd = std::move(fd);
  out.size_bytes = static_cast<int64_t>(after.st_size);
  return out;
}

}  // namespace framezip::media
