// A directory under $TMPDIR that is removed with everything in it when the object dies.
#pragma once

#include <filesystem>
#include <string>

namespace framezip::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The repository root (FRAMEZIP_SOURCE_DIR, set by CTest) and the build dir (FRAMEZIP_BINARY_DIR).
std::filesystem::path SourceDir();
std::filesystem::path BinaryDir();

}  // namespace framezip::testing
