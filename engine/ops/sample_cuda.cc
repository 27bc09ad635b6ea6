// SampleTokens on the GPU: the per-row parameters and penalised ids go up in one small
// asynchronous copy (or came with the step's plan: SampleTokensPlanned), the kernel samples every
// row in place, the B token ids come back (the one host wait).
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/core/buffer.h"
#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/sample.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {
namespace {

// Page-locked staging for each device's sampling parameters, reused once the device has read the
// last upload from it (its fence). Guarded by StagingMutex().
struct Staging {
  std::shared_ptr<void> memory;
  size_t bytes = 0;
  std::shared_ptr<void> fence;
};

std::mutex& StagingMutex() {
  static std::mutex mu;
  return mu;
}

std::map<int, Staging>& Stagings() {
  static auto* stagings = new std::map<int, Staging>();  // never destroyed: see device_memory
  return *stagings;
}

// At least `bytes` of the device's staging, free of any upload still reading it.
StatusOr<void*> ParamStaging(Device device, size_t bytes) {
  Staging& s = Stagings()[device.index];
  if (s.bytes < bytes) {
    size_t size = 4096;
    while (size < bytes) size *= 2;
    FZ_RETURN_IF_ERROR(WaitStepFence(device, s.fence));  // the old buffer may still be read
    FZ_ASSIGN_OR_RETURN(s.memory, AllocateStagingHost(device, size));
    s.bytes = size;
    s.fence.reset();
  } else {
    FZ_RETURN_IF_ERROR(WaitStepFence(device, s.fence));
    s.fence.reset();
  }
  return s.memory.get();
}

Status FenceParamStaging(Device device) {
  FZ_ASSIGN_OR_RETURN(Stagings()[device.index].fence, RecordStepFence(device));
  return absl::OkStatus();
}

}  // namespace

namespace {

// The kernel over every row of `logits` with parameters, penalised ids and token slots already
// on the device, then the ids' read-back: the call's one host wait.
Status LaunchAndReadBack(Tensor& logits, const PlannedSampling& on_device,
                         std::span<int32_t> tokens) {
  const Device device = logits.device();
  ScopedCudaDevice scope(device);
  cuda::SampleParams p;
  p.logits = static_cast<float*>(logits.raw_data());
  p.rows = logits.dim(0);
  p.vocab = logits.dim(1);
  p.row_params = on_device.rows;
  p.penalized = on_device.penalized;
  p.tokens = on_device.tokens;
  FZ_RETURN_IF_ERROR(LaunchStatus(cuda::LaunchSample(p, CurrentFramezipStream()), "SampleTokens"));
  return CopyBytes(tokens.data(), Device::Cpu(), on_device.tokens, device,
                   tokens.size() * sizeof(int32_t));
}

}  // namespace

Status SampleTokensCuda(Tensor& logits, std::span<const RowSampling> rows,
                        std::span<int32_t> tokens) {
  const Device device = logits.device();
  const PackedSampling packed = PackSampling(rows);
  const size_t params_bytes = packed.rows.size() * sizeof(SampleRowParams);
  const size_t penalized_bytes = packed.penalized.size() * sizeof(int32_t);
  const size_t tokens_bytes = tokens.size() * sizeof(int32_t);
  FZ_ASSIGN_OR_RETURN(Buffer scratch,
                      Buffer::Allocate(device, params_bytes + tokens_bytes + penalized_bytes));
  char* base = static_cast<char*>(scratch.data());
  // SampleRowParams first: the allocation's alignment covers its double.
  const PlannedSampling on_device{
      .rows = reinterpret_cast<const SampleRowParams*>(base),
      .penalized = reinterpret_cast<const int32_t*>(base + params_bytes + tokens_bytes),
      .tokens = reinterpret_cast<int32_t*>(base + params_bytes)};
  // The parameters and the penalised ids in one asynchronous copy from page-locked memory (the
  // tokens' bytes between them are sent too, unused: one transfer costs less than two), so the
  // read-back of the ids is the call's only host wait.
  const size_t staged = params_bytes + tokens_bytes + penalized_bytes;
  {
    std::lock_guard<std::mutex> lock(StagingMutex());
    FZ_ASSIGN_OR_RETURN(void* host, ParamStaging(device, staged));
    std::memcpy(host, packed.rows.data(), params_bytes);
    if (penalized_bytes > 0) {
      std::memcpy(static_cast<char*>(host) + params_bytes + tokens_bytes, packed.penalized.data(),
                  penalized_bytes);
    }
    FZ_RETURN_IF_ERROR(UploadAsync(base, device, host, staged));
    FZ_RETURN_IF_ERROR(FenceParamStaging(device));
  }
  return LaunchAndReadBack(logits, on_device, tokens);
}

Status SampleTokensPlannedCuda(Tensor& logits, const PlannedSampling& planned,
                               std::span<int32_t> tokens) {
  return LaunchAndReadBack(logits, planned, tokens);
}

}  // namespace framezip::engine::ops
