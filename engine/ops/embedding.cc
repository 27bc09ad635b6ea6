#include "engine/ops/embedding.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status Embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  constexpr std::string_view kOp = "Embedding";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "table", table));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "ids", ids));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "out", out));
  FZ_RETURN_IF_ERROR(CheckFloat(kOp, "table", table));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "table", table, 2));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "ids", ids, DType::kI32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "ids", ids, 1));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "out", out, DType::kF32));
  if (out.shape() != Shape{ids.dim(0), table.dim(1)}) {
    return InvalidArgumentError("Embedding: out has shape {}, want [{}, {}]",
                                ShapeString(out.shape()), ids.dim(0), table.dim(1));
  }
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, table.device(), {&ids, &out}));
  if (!table.device().is_cpu()) {
    FZ_RETURN_IF_ERROR(CheckDeviceUsable(table.device()));
    return EmbeddingCuda(table, ids, out);  // validates the ids itself (they are on the GPU)
  }
  const int32_t* id = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.dim(0); ++i) {
    if (id[i] < 0 || id[i] >= table.dim(0)) {
      return OutOfRangeError("Embedding: token id {} at index {} is outside the vocabulary [0, {})",
                             id[i], i, table.dim(0));
    }
  }
  return EmbeddingCpu(table, ids, out);
}

}  // namespace framezip::engine::ops
