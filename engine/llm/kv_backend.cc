// KvBackend (kv_backend.h): what it declares it supports, the checks against that, and a step's
// page reservation. Its attention middles are in kv_backend_attend.cc; AttentionPack's blocks are
// LowRankKv's (low_rank_kv.h).
#include "engine/llm/kv_backend.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/core/device_memory.h"
#include "engine/ops/paged_attention.h"

namespace framezip::engine::llm {

KvBackend::KvBackend(const DecoderShape& shape, Device device, bool bf16_attention)
    : shape_(shape), device_(device), bf16_attention_(bf16_attention), low_rank_(shape, device) {}

KvBackend::~KvBackend() = default;

StepReservation::~StepReservation() {
  for (Sequence* seq : seqs_) seq->kv.ReleaseReserve();
}

StatusOr<std::unique_ptr<KvBackend>> KvBackend::Create(const DecoderShape& shape, Device device,
                                                       bool bf16_attention) {
  FZ_RETURN_IF_ERROR(ops::PagedDecodeSupports(device, shape.head_dim));
  std::unique_ptr<KvBackend> backend(new KvBackend(shape, device, bf16_attention));
  backend->staging_ = std::make_unique<StagingPool>(device);
  Capabilities& c = backend->capabilities_;
  c.device = device;
  c.head_dim = shape.head_dim;
  c.page_formats = {kv::KvFormat::kF32, kv::KvFormat::kF16};
  // The quantised codecs pack blocks of 32 channels (ops/kv_quant.h).
  if (shape.head_dim % 32 == 0) {
    c.page_formats.push_back(kv::KvFormat::kInt4);
    c.page_formats.push_back(kv::KvFormat::kInt2);
  }
  return backend;
}

StatusOr<Tensor> KvBackend::UploadInts(std::span<const int32_t> values) const {
  const int64_t n = static_cast<int64_t>(values.size());
  FZ_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({n}, DType::kI32, device_));
  if (n == 0) return out;
  if (device_.is_cpu()) {
    std::copy(values.begin(), values.end(), out.data<int32_t>());
    return out;
  }
  FZ_ASSIGN_OR_RETURN(StagingPool::Entry entry, staging_->Take(values.size_bytes()));
  std::memcpy(entry.memory.get(), values.data(), values.size_bytes());
  const Status sent = UploadAsync(out.raw_data(), device_, entry.memory.get(), values.size_bytes());
  staging_->GiveAfterQueuedWork(std::move(entry));  // reused once the copy has read it
  FZ_RETURN_IF_ERROR(sent);
  return out;
}

Status KvBackend::CheckPool(const kv::PageLayout& layout, Device pool_device) const {
  if (layout.num_kv_heads != shape_.kv_heads || layout.head_dim != shape_.head_dim) {
    return InvalidArgumentError("KV pool has {} heads × {} dims, model needs {} × {}",
                                layout.num_kv_heads, layout.head_dim, shape_.kv_heads,
                                shape_.head_dim);
  }
  // Attention reads the pages with this device's kernels: they must be where those run.
  if (pool_device != device_) {
    return InvalidArgumentError("KV pool pages are on {}, the decoder runs on {}",
                                DeviceName(pool_device), DeviceName(device_));
  }
  const std::vector<kv::KvFormat>& formats = capabilities_.page_formats;
  if (std::find(formats.begin(), formats.end(), layout.format) == formats.end()) {
    std::string names;
    for (const kv::KvFormat f : formats) {
      names += (names.empty() ? "" : ", ") + std::string(kv::KvFormatName(f));
    }
    return InvalidArgumentError(
        "KV pool holds {} pages, which the {} kernels do not read at head_dim {} (they read {})",
        kv::KvFormatName(layout.format), DeviceName(device_), shape_.head_dim, names);
  }
  return absl::OkStatus();
}

Status KvBackend::Reserve(std::span<const StepDemand> demands, StepReservation& held) const {
  for (size_t i = 0; i < demands.size(); ++i) {
    const StepDemand& demand = demands[i];
    const Status reserved = demand.seq->kv.ReserveAppend(demand.tokens, demand.classified);
    if (!reserved.ok()) {
      // All or nothing over the step: the demands already met give their pages back.
      for (size_t j = 0; j < i; ++j) demands[j].seq->kv.ReleaseReserve();
      return reserved;
    }
    held.seqs_.push_back(demand.seq);
  }
  return absl::OkStatus();
}

StatusOr<Tensor> KvBackend::Empty(Shape shape) const {
  return Tensor::Empty(std::move(shape), DType::kF32, device_);
}

}  // namespace framezip::engine::llm
