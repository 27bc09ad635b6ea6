#include "common/status.h"

#include <cstdio>

namespace framezip {

void CheckFailed(const char* file, int line, std::string_view what) {
  std::fprintf(stderr, "%s:%d: FZ_CHECK failed: %.*s\n", file, line, static_cast<int>(what.size()),
               what.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace framezip
