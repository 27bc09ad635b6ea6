#include "engine/ops/embedding.h"

#include "engine/core/step_counters.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

namespace {

Status CheckIdsInVocabulary(const int32_t* id, int64_t count, int64_t vocab) {
  for (int64_t i = 0; i < count; ++i) {
    if (id[i] < 0 || id[i] >= vocab) {
      return OutOfRangeError("Embedding: token id {} at index {} is outside the vocabulary [0, {})",
                             id[i], i, vocab);
    }
  }
  return absl::OkStatus();
}

Status CheckEmbeddingArgs(const Tensor& table, const Tensor& ids, Tensor& out) {
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
  return CheckOnDevice(kOp, table.device(), {&ids, &out});
}

}  // namespace

Status Embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  FZ_RETURN_IF_ERROR(CheckEmbeddingArgs(table, ids, out));
  if (!table.device().is_cpu()) {
    FZ_RETURN_IF_ERROR(CheckDeviceUsable(table.device()));
    return EmbeddingCuda(table, ids, out);  // validates the ids itself (they are on the GPU)
  }
  FZ_RETURN_IF_ERROR(CheckIdsInVocabulary(ids.data<int32_t>(), ids.dim(0), table.dim(0)));
  CountLaunches(1);
  return EmbeddingCpu(table, ids, out);
}

Status Embedding(const Tensor& table, const Tensor& ids, std::span<const int32_t> host_ids,
                 Tensor& out) {
  FZ_RETURN_IF_ERROR(CheckEmbeddingArgs(table, ids, out));
  if (static_cast<int64_t>(host_ids.size()) != ids.dim(0)) {
    return InvalidArgumentError("Embedding: {} host ids for {} ids", host_ids.size(), ids.dim(0));
  }
  FZ_RETURN_IF_ERROR(CheckIdsInVocabulary(host_ids.data(), ids.dim(0), table.dim(0)));
  if (!table.device().is_cpu()) {
    FZ_RETURN_IF_ERROR(CheckDeviceUsable(table.device()));
    return EmbeddingCheckedCuda(table, ids, out);
  }
  CountLaunches(1);
  return EmbeddingCpu(table, ids, out);
}

}  // namespace framezip::engine::ops
