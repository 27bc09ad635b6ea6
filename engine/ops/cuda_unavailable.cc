// Compiled only in builds without CUDA: every op's CUDA entry point answers UNIMPLEMENTED, so the
// dispatchers in ops/*.cc link unchanged and no header needs a CUDA #ifdef. (Dispatchers check
// CheckDeviceUsable() first, so these are reached only by direct calls.)
#include "engine/ops/cast_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/kv_quant_cuda.h"
#include "engine/ops/low_rank_cuda.h"
#include "engine/ops/quick_gelu_backends.h"
#include "engine/ops/zipvl_cuda.h"

namespace framezip::engine::ops {
namespace {
Status NoCuda(const char* op) {
  return absl::UnimplementedError(fmt::format("{}: this binary was built without CUDA", op));
}
}  // namespace

Status CastCuda(const Tensor&, Tensor&) { return NoCuda("Cast"); }
Status LinearCuda(const Tensor&, const Tensor&, const Tensor&, Tensor&) { return NoCuda("Linear"); }
Status LinearFp8Cuda(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  return NoCuda("Linear");
}
bool Fp8LinearAvailableCuda(Device) { return false; }
Status MatMulCuda(const Tensor&, const Tensor&, bool, Tensor&) { return NoCuda("MatMul"); }
Status RmsNormCuda(const Tensor&, const Tensor&, float, Tensor&) { return NoCuda("RmsNorm"); }
Status AddRmsNormCuda(Tensor&, const Tensor&, const Tensor&, float, Tensor&) {
  return NoCuda("AddRmsNorm");
}
Status LayerNormCuda(const Tensor&, const Tensor&, const Tensor&, float, Tensor&) {
  return NoCuda("LayerNorm");
}
Status SoftmaxCuda(const Tensor&, Tensor&) { return NoCuda("Softmax"); }
Status GeluCuda(const Tensor&, GeluApproximation, Tensor&) { return NoCuda("Gelu"); }
Status QuickGeluCuda(const Tensor&, Tensor&) { return NoCuda("QuickGelu"); }
Status SiluMulCuda(const Tensor&, const Tensor&, Tensor&) { return NoCuda("SiluMul"); }
Status SiluMulHalvesCuda(const Tensor&, Tensor&) { return NoCuda("SiluMulHalves"); }
Status UnfoldPatchesCuda(const Tensor&, int64_t, DType, Tensor&) { return NoCuda("UnfoldPatches"); }
Status AddCuda(const Tensor&, const Tensor&, Tensor&) { return NoCuda("Add"); }
Status EmbeddingCuda(const Tensor&, const Tensor&, Tensor&) { return NoCuda("Embedding"); }
Status EmbeddingCheckedCuda(const Tensor&, const Tensor&, Tensor&) { return NoCuda("Embedding"); }
Status CopyRowSlicesCuda(Device, int64_t, int64_t, const SourceRows&, const DestinationRows&) {
  return NoCuda("CopyRowSlices");
}
Status SampleTokensCuda(Tensor&, std::span<const RowSampling>, std::span<int32_t>) {
  return NoCuda("SampleTokens");
}
Status SampleTokensPlannedCuda(Tensor&, const PlannedSampling&, std::span<int32_t>) {
  return NoCuda("SampleTokensPlanned");
}
Status BilinearResizeCuda(const Tensor&, Tensor&, ImageLayout) { return NoCuda("BilinearResize"); }
Status ApplyRopeCuda(Tensor&, const Tensor&, const RopeParams&, bool) {
  return NoCuda("ApplyRope");
}
Status RopeSplitQkvCuda(const Tensor&, const Tensor&, const RopeParams&, bool, Tensor&, Tensor&,
                        Tensor&) {
  return NoCuda("RopeSplitQkv");
}
Status AttentionCuda(const Tensor&, const Tensor&, const Tensor&, const AttentionParams&, Tensor&) {
  return NoCuda("Attention");
}
Status PlanPagedDecodeCuda(Device, const PagedKv&, int64_t, std::vector<std::byte>&,
                           PagedDecodePlan&) {
  return NoCuda("PagedDecodeAttention (planned)");
}
Status PagedDecodeAttentionPlannedCuda(const Tensor&, const PagedDecodePlan&, const std::byte*,
                                       float*, float, Tensor&, float*) {
  return NoCuda("PagedDecodeAttention (planned)");
}
Status MergeAttentionPartsCuda(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor&, Tensor&, Tensor&, Tensor&) {
  return NoCuda("MergeAttentionParts");
}
Status AttentionTokenSharesCuda(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                Tensor&) {
  return NoCuda("AttentionTokenShares");
}
Status WriteKvSlotsCuda(Device, const KvSlot*, int64_t, int64_t, const float*, const float*) {
  return NoCuda("WriteKvSlots");
}
Status GatherPagedKvCuda(const PagedKv&, int64_t, Device, float*, float*) {
  return NoCuda("GatherPagedKv");
}
Status WriteKvPageRunsCuda(Device, std::span<const KvPageRun>, int64_t, const float*,
                           const float*) {
  return NoCuda("WriteKvPageRuns");
}
Status PagedDecodeAttentionCuda(const Tensor&, const PagedKv&, float, Tensor&, float*) {
  return NoCuda("PagedDecodeAttention");
}
Status LocalWindowAttentionCuda(const Tensor&, const Tensor&, const Tensor&, const float*,
                                const float*, int64_t, std::span<const int32_t>, int64_t, int64_t,
                                const LocalWindow&, Tensor&) {
  return NoCuda("LocalWindowAttention");
}
Status QuantizeKvPagesCuda(const Tensor&, const Tensor&, int64_t, int, std::span<void* const>) {
  return NoCuda("QuantizeKvPages");
}
StatusOr<DeviceLowRankFactors> RandomizedSvdCuda(const Tensor&, const RandomizedSvdOptions&) {
  return NoCuda("RandomizedSvd");
}
Status EncodeLowRankFactorCuda(const Tensor&, FactorView::Format, Tensor&, Tensor&) {
  return NoCuda("EncodeLowRankFactor");
}
Status LowRankBlockAttendCuda(const Tensor&, const LowRankBlockView&, const LowRankAttentionShape&,
                              const RopeParams&, float, Tensor&, Tensor&, Tensor&, Tensor&) {
  return NoCuda("LowRankBlockAttend");
}
Status ProbeScoresCuda(const Tensor&, const Tensor&, std::span<const int32_t>, bool, Tensor&,
                       Tensor&, Tensor&) {
  return NoCuda("ProbeScores");
}
StatusOr<int64_t> TopPCuda(const Tensor&, const Tensor&, double, Tensor&) { return NoCuda("TopP"); }
Status SparsePrefillCuda(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                         Tensor&) {
  return NoCuda("SparsePrefill");
}
StatusOr<int64_t> ZipvlSparsePrefillCuda(const Tensor&, const Tensor&, const Tensor&,
                                         std::span<const int32_t>, double, Tensor&) {
  return NoCuda("ZipvlSparsePrefill");
}

}  // namespace framezip::engine::ops
