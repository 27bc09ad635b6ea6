#include "engine/runtime/weight_bytes.h"

#include <initializer_list>
#include <unordered_set>

namespace framezip::engine::runtime {
namespace {

// Sums tensors by their storage: a tensor reached twice (the tied head) counts once.
class HeldBytes {
 public:
  void Add(const Tensor& t) {
    if (t.defined() && seen_.insert(t.raw_data()).second) total_ += t.nbytes();
  }
  void Add(std::initializer_list<const Tensor*> tensors) {
    for (const Tensor* t : tensors) Add(*t);
  }
  size_t total() const { return total_; }

 private:
  std::unordered_set<const void*> seen_;
  size_t total_ = 0;
};

void AddDecoder(const llm::DecoderWeights& w, HeldBytes& held) {
  held.Add({&w.embed_tokens, &w.norm, &w.lm_head, &w.lm_head_scale});
  for (const llm::LayerWeights& L : w.layers) {
    for (const Tensor* t : llm::LayerTensors(L)) held.Add(*t);
  }
}

void AddVision(const vision::LlavaVisionWeights& w, HeldBytes& held) {
  for (const Tensor* t : vision::TowerEmbeddingTensors(w.tower)) held.Add(*t);
  for (const vision::EncoderLayerWeights& L : w.tower.layers) {
    for (const Tensor* t : vision::EncoderLayerTensors(L)) held.Add(*t);
  }
  for (const Tensor* t : vision::ProjectorTensors(w.projector)) held.Add(*t);
  held.Add(w.image_newline);
}

}  // namespace

size_t HeldWeightBytes(const llm::DecoderWeights& decoder,
                       const vision::LlavaVisionWeights& vision) {
  HeldBytes held;
  AddDecoder(decoder, held);
  AddVision(vision, held);
  return held.total();
}

StatusOr<int64_t> KvBudgetLeftByWeights(int64_t memory_budget_bytes, size_t weight_bytes,
                                        size_t page_bytes, std::string_view weight_format) {
  if (memory_budget_bytes <= 0 || page_bytes == 0) {
    return InvalidArgumentError(
        "memory budget {} bytes with KV pages of {} bytes: both must be > 0", memory_budget_bytes,
        page_bytes);
  }
  constexpr double kMiB = 1 << 20;
  const int64_t left = memory_budget_bytes - static_cast<int64_t>(weight_bytes);
  if (left < static_cast<int64_t>(page_bytes)) {
    const bool sixteen_bit = weight_format == "bf16";
    return ResourceExhaustedError(
        "the memory budget of {:.1f} MiB holds the {} weights ({:.1f} MiB) but not one KV page "
        "({} bytes) beside them: raise the budget{}",
        static_cast<double>(memory_budget_bytes) / kMiB, weight_format,
        static_cast<double>(weight_bytes) / kMiB, page_bytes,
        sixteen_bit ? ", or hold the weights in 8 bits (--weight-format int8 on the CPU, fp8 on "
                      "a GPU)"
                    : "");
  }
  return left;
}

}  // namespace framezip::engine::runtime
