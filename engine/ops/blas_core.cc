#include "engine/ops/blas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace framezip::engine::ops::cpu {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool OneOf(const std::string& name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

std::string BetterBlasCore(const CpuIsa& isa, std::string_view current) {
  const std::string core = Lower(current);
  // OpenBLAS's AVX-512 sgemm kernels are SkylakeX's; Cooperlake and SapphireRapids add bf16
  // routines on top of them.
  const bool avx512_core = OneOf(core, {"skylakex", "cooperlake", "sapphirerapids"});
  // Haswell's and Zen's are its AVX2+FMA kernels.
  const bool avx2_core = avx512_core || OneOf(core, {"haswell", "zen"});
  if (isa.avx512f && !avx512_core) return "SkylakeX";
  if (isa.avx2 && !isa.avx512f && !avx2_core) return "Haswell";
  return "";
}

void ReexecWithFasterBlasCore(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string current = BlasCoreName();
  const std::string better = BetterBlasCore(DetectedIsa(), current);
  if (better.empty()) return;
  if (setenv("OPENBLAS_CORETYPE", better.c_str(), 1) == 0) {
    execv("/proc/self/exe", argv);
  }
  std::fprintf(stderr,
               "warning: OpenBLAS chose its %s kernels on this CPU and re-executing with "
               "OPENBLAS_CORETYPE=%s failed (%s): matrix products run well below this CPU's peak; "
               "set OPENBLAS_CORETYPE=%s to fix it\n",
               current.c_str(), better.c_str(), std::strerror(errno), better.c_str());
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace framezip::engine::ops::cpu
