// CUDA entry points of the ops in this folder (x_cuda.cc files, adapting Tensor to the raw-pointer
// launchers of engine/kernels/cuda). The dispatchers in x.cc call them after checking every
// argument and that the device is usable; in builds without CUDA, cuda_unavailable.cc answers
// UNIMPLEMENTED instead. Kernels run on framezip's stream of the device
// (engine/core/cuda_stream_cuda.h); an op returns once its work is queued (a later copy to the host
// waits for it).
#pragma once

#include <span>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/attention_local.h"
#include "engine/ops/bilinear_resize.h"
#include "engine/ops/kv_slots.h"
#include "engine/ops/paged_attention.h"
#include "engine/ops/rope.h"
#include "engine/ops/row_slices.h"
#include "engine/ops/sample.h"

namespace framezip::engine::ops {

Status LinearCuda(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y);
// weight [N, K] E4M3 with weight_scale [N] f32 on the device (linear_fp8_cuda.cc).
Status LinearFp8Cuda(const Tensor& x, const Tensor& weight, const Tensor& weight_scale,
                     const Tensor& bias, Tensor& y);
bool Fp8LinearAvailableCuda(Device device);
Status MatMulCuda(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& c);
Status RmsNormCuda(const Tensor& x, const Tensor& weight, float eps, Tensor& y);
Status AddRmsNormCuda(Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                      Tensor& y);
Status LayerNormCuda(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                     Tensor& y);
Status SoftmaxCuda(const Tensor& x, Tensor& y);
Status GeluCuda(const Tensor& x, GeluApproximation approximation, Tensor& y);
Status SiluMulCuda(const Tensor& gate, const Tensor& up, Tensor& y);
Status SiluMulHalvesCuda(const Tensor& gate_up, Tensor& y);
Status UnfoldPatchesCuda(const Tensor& pixels, int64_t patch, DType round_to, Tensor& cols);
Status AddCuda(const Tensor& a, const Tensor& b, Tensor& y);
Status EmbeddingCuda(const Tensor& table, const Tensor& ids, Tensor& out);
// The ids were checked on the host (their host copy): the gather alone.
Status EmbeddingCheckedCuda(const Tensor& table, const Tensor& ids, Tensor& out);
Status BilinearResizeCuda(const Tensor& in, Tensor& out, ImageLayout layout);
// positions_checked: the caller checked the positions on the host already.
Status ApplyRopeCuda(Tensor& x, const Tensor& positions, const RopeParams& params,
                     bool positions_checked);
Status RopeSplitQkvCuda(const Tensor& qkv, const Tensor& positions, const RopeParams& params,
                        bool positions_checked, Tensor& q, Tensor& k, Tensor& v);
Status AttentionCuda(const Tensor& q, const Tensor& k, const Tensor& v,
                     const AttentionParams& params, Tensor& out);
// lse: null, or [B, H] device floats for each row's log-sum-exp (PagedDecodeAttention).
Status PagedDecodeAttentionCuda(const Tensor& q, const PagedKv& kv, float scale, Tensor& out,
                                float* lse = nullptr);
// Fills plan.offset, num_items and workspace_floats, appending the kernel's descriptors to arena.
Status PlanPagedDecodeCuda(Device device, const PagedKv& kv, int64_t heads,
                           std::vector<std::byte>& arena, PagedDecodePlan& plan);
Status PagedDecodeAttentionPlannedCuda(const Tensor& q, const PagedDecodePlan& plan,
                                       const std::byte* arena, float* workspace, float scale,
                                       Tensor& out, float* lse = nullptr);
Status MergeAttentionPartsCuda(const Tensor& base, const Tensor& base_lse, const Tensor& part_max,
                               const Tensor& part_sum, const Tensor& part_out, Tensor& out,
                               Tensor& total_max, Tensor& total_sum);
Status AttentionTokenSharesCuda(const Tensor& weights, const Tensor& part_max,
                                const Tensor& total_max, const Tensor& total_sum, Tensor& probs);
Status WriteKvSlotsCuda(Device device, const KvSlot* slots, int64_t rows, int64_t channels,
                        const float* k, const float* v);
// Sequence b's spans (checked, none low-rank) as dense f32 rows on the device.
Status GatherPagedKvCuda(const PagedKv& kv, int64_t b, Device device, float* k, float* v);
Status WriteKvPageRunsCuda(Device device, std::span<const KvPageRun> runs, int64_t channels,
                           const float* k, const float* v);
// past_k and past_v are device pointers.
Status LocalWindowAttentionCuda(const Tensor& q, const Tensor& k, const Tensor& v,
                                const float* past_k, const float* past_v, int64_t past,
                                std::span<const int32_t> rows, int64_t h0, int64_t nh,
                                const LocalWindow& params, Tensor& out);

Status CopyRowSlicesCuda(Device device, int64_t count, int64_t width, const SourceRows& src,
                         const DestinationRows& dst);

Status SampleTokensCuda(Tensor& logits, std::span<const RowSampling> rows,
                        std::span<int32_t> tokens);
Status SampleTokensPlannedCuda(Tensor& logits, const PlannedSampling& planned,
                               std::span<int32_t> tokens);

}  // namespace framezip::engine::ops
