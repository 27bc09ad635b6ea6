// Compiled only in builds without CUDA: every op's CUDA entry point answers UNIMPLEMENTED, so the
// dispatchers in ops/*.cc link unchanged and no header needs a CUDA #ifdef. (Dispatchers check
// CheckDeviceUsable() first, so these are reached only by direct calls.)
#include "engine/ops/cast_backends.h"

namespace framezip::engine::ops {
namespace {
Status NoCuda(const char* op) {
  return absl::UnimplementedError(fmt::format("{}: this binary was built without CUDA", op));
}
}  // namespace

Status CastCuda(const Tensor&, Tensor&) { return NoCuda("Cast"); }

}  // namespace framezip::engine::ops
