// LowRankBlockAttendCuda: the shared shape checks, the tensors' checks, the RoPE frequencies and
// the chunk partials staged on the device, then the two-pass kernel.
#include "engine/ops/low_rank_cuda.h"

#include <cmath>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/low_rank.cuh"
#include "engine/ops/cuda_op_util_cuda.h"
#include "engine/ops/low_rank_checks.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {
namespace {

constexpr std::string_view kOp = "LowRankBlockAttendCuda";

cuda::DeviceFactor ToDevice(const FactorView& v) {
  cuda::DeviceFactor f;
  f.rows = v.rows;
  f.cols = v.cols;
  switch (v.format) {
    case FactorView::Format::kF32:
      f.format = cuda::DeviceFactor::kF32;
      f.f32 = v.f32;
      break;
    case FactorView::Format::kF16:
      f.format = cuda::DeviceFactor::kF16;
      f.f16 = reinterpret_cast<const uint16_t*>(v.f16);
      break;
    case FactorView::Format::kInt4:
      f.format = cuda::DeviceFactor::kInt4;
      f.packed = v.packed;
      f.scales = reinterpret_cast<const uint16_t*>(v.scales);
      f.group_rows = v.group_rows;
      break;
  }
  return f;
}

Status CheckOutput(std::string_view name, const Tensor& t, const Shape& want, Device device) {
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, name, t));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, name, t, DType::kF32));
  if (t.shape() != want) {
    return InvalidArgumentError("{}: {} has shape {}, want {}", kOp, name, ShapeString(t.shape()),
                                ShapeString(want));
  }
  if (t.device() != device) {
    return InvalidArgumentError("{}: {} is on {}, q on {}", kOp, name, DeviceName(t.device()),
                                DeviceName(device));
  }
  return absl::OkStatus();
}

Status CheckBytes(std::string_view op, std::string_view name, const Tensor& t, int64_t bytes,
                  Device device) {
  FZ_RETURN_IF_ERROR(CheckDefined(op, name, t));
  FZ_RETURN_IF_ERROR(CheckDType(op, name, t, DType::kU8));
  if (t.numel() != bytes || t.device() != device) {
    return InvalidArgumentError("{}: {} is {} bytes on {}, want {} on {}", op, name, t.numel(),
                                DeviceName(t.device()), bytes, DeviceName(device));
  }
  return absl::OkStatus();
}

// The RoPE inverse frequencies of `rope` on `device`, uploaded once per (device, parameters) and
// kept for the process: a decode step attends every block of every layer with the same few, and a
// copy per call would wait for the device each time. Never freed (no device memory is released
// during the process's exit, after the CUDA runtime may be gone).
StatusOr<const float*> DeviceInverseFrequencies(const RopeParams& rope, Device device) {
  static std::mutex mu;
  static auto& cached = *new std::vector<std::tuple<int, RopeParams, Tensor>>();
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [index, params, table] : cached) {
    if (index == device.index && params == rope) return table.data<float>();
  }
  const std::vector<float> inv_freq = RopeInverseFrequencies(rope);
  FZ_ASSIGN_OR_RETURN(Tensor table,
                      Tensor::Empty({static_cast<int64_t>(inv_freq.size())}, DType::kF32, device));
  FZ_RETURN_IF_ERROR(CopyBytes(table.raw_data(), device, inv_freq.data(), Device::Cpu(),
                               inv_freq.size() * sizeof(float)));
  cached.emplace_back(device.index, rope, table);
  return std::get<2>(cached.back()).data<float>();
}

}  // namespace

Status EncodeLowRankFactorCuda(const Tensor& values, FactorView::Format format, Tensor& data,
                               Tensor& scales) {
  constexpr std::string_view kEncode = "EncodeLowRankFactorCuda";
  FZ_RETURN_IF_ERROR(CheckDefined(kEncode, "values", values));
  FZ_RETURN_IF_ERROR(CheckDType(kEncode, "values", values, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kEncode, "values", values, 2));
  if (values.device().is_cpu()) return InvalidArgumentError("{}: values must be on a GPU", kEncode);
  const int64_t rows = values.dim(0), cols = values.dim(1);
  if (rows < 1 || cols < 1) {
    return InvalidArgumentError("{}: values is {}x{}", kEncode, rows, cols);
  }
  cuda::EncodeFactorLaunch p;
  p.values = values.data<float>();
  p.rows = rows;
  p.cols = cols;
  p.group_rows = kFactorInt4GroupRows;
  if (format == FactorView::Format::kF16) {
    FZ_RETURN_IF_ERROR(CheckBytes(kEncode, "data", data, rows * cols * 2, values.device()));
    p.format = cuda::DeviceFactor::kF16;
    p.f16 = static_cast<uint16_t*>(data.raw_data());
  } else if (format == FactorView::Format::kInt4) {
    const int64_t groups = (rows + kFactorInt4GroupRows - 1) / kFactorInt4GroupRows;
    FZ_RETURN_IF_ERROR(CheckBytes(kEncode, "data", data, (rows * cols + 1) / 2, values.device()));
    FZ_RETURN_IF_ERROR(CheckBytes(kEncode, "scales", scales, groups * cols * 2, values.device()));
    p.format = cuda::DeviceFactor::kInt4;
    p.packed = static_cast<uint8_t*>(data.raw_data());
    p.scales = static_cast<uint16_t*>(scales.raw_data());
  } else {
    return InvalidArgumentError("{}: factors are stored as f16 or int4, not f32", kEncode);
  }
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(values.device()));
  ScopedCudaDevice scope(values.device());
  return LaunchStatus(cuda::LaunchEncodeFactor(p, CurrentFramezipStream()), kEncode);
}

Status LowRankBlockAttendCuda(const Tensor& q, const LowRankBlockView& block,
                              const LowRankAttentionShape& shape, const RopeParams& rope,
                              float scale, Tensor& weights, Tensor& max, Tensor& sum, Tensor& out) {
  static_assert(sizeof(Float16) == sizeof(uint16_t), "f16 factors are read as bit patterns");
  FZ_RETURN_IF_ERROR(CheckLowRankBlockShape(kOp, block, shape, rope));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "q", q));
  if (q.device().is_cpu()) return InvalidArgumentError("{}: q must be on a GPU", kOp);
  const int64_t heads = shape.num_heads, d = shape.head_dim;
  const int64_t tokens = static_cast<int64_t>(block.positions.size());
  FZ_RETURN_IF_ERROR(CheckOutput("q", q, Shape{heads, d}, q.device()));
  FZ_RETURN_IF_ERROR(CheckOutput("weights", weights, Shape{heads, tokens}, q.device()));
  FZ_RETURN_IF_ERROR(CheckOutput("max", max, Shape{heads}, q.device()));
  FZ_RETURN_IF_ERROR(CheckOutput("sum", sum, Shape{heads}, q.device()));
  FZ_RETURN_IF_ERROR(CheckOutput("out", out, Shape{heads, d}, q.device()));
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(q.device()));
  if (tokens == 0) {
    // An empty block: max −inf, sum 0, out 0 (as the CPU op leaves them).
    std::vector<float> minus_inf(static_cast<size_t>(heads), -INFINITY),
        zeros(static_cast<size_t>(heads * d), 0.f);
    FZ_RETURN_IF_ERROR(CopyBytes(max.raw_data(), max.device(), minus_inf.data(), Device::Cpu(),
                                 minus_inf.size() * sizeof(float)));
    FZ_RETURN_IF_ERROR(CopyBytes(sum.raw_data(), sum.device(), zeros.data(), Device::Cpu(),
                                 static_cast<size_t>(heads) * sizeof(float)));
    return CopyBytes(out.raw_data(), out.device(), zeros.data(), Device::Cpu(),
                     zeros.size() * sizeof(float));
  }
  const int64_t rank_k = block.key_us.cols, rank_v = block.value_us.cols;
  const size_t shared =
      cuda::LowRankAttendSharedBytes(static_cast<int>(heads), static_cast<int>(d), rank_k, rank_v);
  ScopedCudaDevice scope(q.device());
  FZ_ASSIGN_OR_RETURN(const float* inv_freq, DeviceInverseFrequencies(rope, q.device()));
  FZ_ASSIGN_OR_RETURN(Tensor scratch,
                      Tensor::Empty({static_cast<int64_t>(cuda::LowRankAttendScratchFloats(
                                        tokens, static_cast<int>(heads), rank_v))},
                                    DType::kF32, q.device()));
  cuda::LowRankAttendLaunch p;
  p.q = q.data<float>();
  p.key_us = ToDevice(block.key_us);
  p.key_vt = ToDevice(block.key_vt);
  p.value_us = ToDevice(block.value_us);
  p.value_vt = ToDevice(block.value_vt);
  p.positions = block.positions.data();
  p.value_ranks = block.value_ranks.data();
  p.inv_freq = inv_freq;
  p.tokens = tokens;
  p.heads = static_cast<int>(heads);
  p.kv_heads = shape.num_kv_heads;
  p.head_dim = static_cast<int>(d);
  p.scale = scale == 0 ? 1.f / std::sqrt(static_cast<float>(d)) : scale;
  p.weights = weights.data<float>();
  p.max = max.data<float>();
  p.sum = sum.data<float>();
  p.out = out.data<float>();
  p.scratch = scratch.data<float>();
  const cudaError_t err = cuda::LaunchLowRankAttend(p, CurrentFramezipStream());
  CountLaunches(1);
  if (err == cudaErrorInvalidValue) {
    return InvalidArgumentError(
        "{}: {} heads of {} with ranks {}/{} need {} bytes of shared memory per block, more than "
        "this GPU gives",
        kOp, heads, d, rank_k, rank_v, shared);
  }
  // The scratch tensors are freed when this returns; the allocator orders the free after the
  // queued kernels on framezip's stream.
  return CudaStatus(err, kOp);
}

}  // namespace framezip::engine::ops
