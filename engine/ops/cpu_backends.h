// CPU entry points of the ops in this folder (x_cpu.cc files); the dispatchers in x.cc call them
// after checking every argument, so they assume valid shapes and dtypes. The CUDA entry points
// are in cuda_backends.h; ops without them still answer UNIMPLEMENTED for CUDA tensors.
#pragma once

#include <span>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/paged_attention.h"
#include "engine/ops/rope.h"
#include "engine/ops/sample.h"

namespace framezip::engine::ops {

Status LinearCpu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y);
Status MatMulCpu(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& c);
Status LayerNormCpu(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y);
Status RmsNormCpu(const Tensor& x, const Tensor& weight, float eps, Tensor& y);
Status GeluCpu(const Tensor& x, GeluApproximation approximation, Tensor& y);
Status SiluMulCpu(const Tensor& gate, const Tensor& up, Tensor& y);
Status SiluMulHalvesCpu(const Tensor& gate_up, Tensor& y);
Status UnfoldPatchesCpu(const Tensor& pixels, int64_t patch, DType round_to, Tensor& cols);
Status AddCpu(const Tensor& a, const Tensor& b, Tensor& y);
Status EmbeddingCpu(const Tensor& table, const Tensor& ids, Tensor& out);
Status SoftmaxCpu(const Tensor& x, Tensor& y);
Status ApplyRopeCpu(Tensor& x, const Tensor& positions, const RopeParams& params);
Status RopeSplitQkvCpu(const Tensor& qkv, const Tensor& positions, const RopeParams& params,
                       Tensor& q, Tensor& k, Tensor& v);
Status AttentionCpu(const Tensor& q, const Tensor& k, const Tensor& v,
                    const AttentionParams& params, Tensor& out);
// lse: null, or [B, H] host floats for each row's log-sum-exp (PagedDecodeAttention).
Status PagedDecodeAttentionCpu(const Tensor& q, const PagedKv& kv, float scale, Tensor& out,
                               float* lse = nullptr);

Status MergeAttentionPartsCpu(const Tensor& base, const Tensor& base_lse, const Tensor& part_max,
                              const Tensor& part_sum, const Tensor& part_out, Tensor& out,
                              Tensor& total_max, Tensor& total_sum);
Status AttentionTokenSharesCpu(const Tensor& weights, const Tensor& part_max,
                               const Tensor& total_max, const Tensor& total_sum, Tensor& probs);

Status SampleTokensCpu(Tensor& logits, std::span<const RowSampling> rows,
                       std::span<int32_t> tokens);

}  // namespace framezip::engine::ops
