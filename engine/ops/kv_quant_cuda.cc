// QuantizeKvPagesCuda: checks, then the page-pointer array is staged on the device for the
// one-block-per-page kernel.
#include "engine/ops/kv_quant_cuda.h"

#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/kv_quant.cuh"
#include "engine/ops/cuda_op_util_cuda.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status QuantizeKvPagesCuda(const Tensor& k, const Tensor& v, int64_t page_tokens, int bits,
                           std::span<void* const> pages) {
  constexpr std::string_view kOp = "QuantizeKvPages";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "k", k));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "v", v));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "k", k, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "v", v, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "k", k, 3));
  FZ_RETURN_IF_ERROR(CheckSameShape(kOp, "k", k, "v", v));
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, k.device(), {&v}));
  if (k.device().is_cpu()) return InvalidArgumentError("{}: k and v must be on a GPU", kOp);
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(k.device()));
  const int64_t n = k.dim(0), channels = k.dim(1) * k.dim(2);
  if ((bits != 4 && bits != 2) || channels % 32 != 0 || channels > 6144 || page_tokens <= 0 ||
      page_tokens % 8 != 0) {
    return InvalidArgumentError("{}: bits {}, {} channels, {} page tokens", kOp, bits, channels,
                                page_tokens);
  }
  const int64_t num_pages = (n + page_tokens - 1) / page_tokens;
  if (static_cast<int64_t>(pages.size()) != num_pages) {
    return InvalidArgumentError("{}: {} tokens need {} pages, got {}", kOp, n, num_pages,
                                pages.size());
  }
  if (n == 0) return absl::OkStatus();
  ScopedCudaDevice scope(k.device());
  FZ_ASSIGN_OR_RETURN(
      Tensor table,
      Tensor::Empty({static_cast<int64_t>(pages.size() * sizeof(void*))}, DType::kU8, k.device()));
  FZ_RETURN_IF_ERROR(CopyBytes(table.raw_data(), k.device(), pages.data(), Device::Cpu(),
                               pages.size() * sizeof(void*)));
  cuda::QuantizePagesLaunch p;
  p.k = static_cast<const float*>(k.raw_data());
  p.v = static_cast<const float*>(v.raw_data());
  p.num_tokens = n;
  p.channels = static_cast<int>(channels);
  p.page_tokens = static_cast<int>(page_tokens);
  p.bits = bits;
  p.pages = static_cast<void* const*>(table.raw_data());
  return LaunchStatus(cuda::LaunchQuantizePages(p, CurrentFramezipStream()), kOp);
}

}  // namespace framezip::engine::ops
