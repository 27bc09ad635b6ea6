#include "tests/testing/temp_dir.h"

#include <cstdlib>
#include <stdexcept>

namespace framezip::testing {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "framezip-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

namespace {
std::filesystem::path FromEnv(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return std::filesystem::path(v != nullptr ? v : fallback);
}
}  // namespace

std::filesystem::path SourceDir() {
  return FromEnv("FRAMEZIP_SOURCE_DIR", FRAMEZIP_TEST_SOURCE_DIR);
}
std::filesystem::path BinaryDir() {
  return FromEnv("FRAMEZIP_BINARY_DIR", FRAMEZIP_TEST_BINARY_DIR);
}

}  // namespace framezip::testing
