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
    for (const auto& p : llm::LayerProjections(L)) held.Add({p.weight, p.scale});
    held.Add({&L.input_layernorm, &L.post_attention_layernorm, &L.q_bias, &L.k_bias, &L.v_bias,
              &L.o_bias, &L.gate_bias, &L.up_bias, &L.down_bias, &L.qkv_proj, &L.qkv_bias,
              &L.gate_up_proj, &L.qkv_scale, &L.gate_up_scale});
  }
}

void AddVision(const vision::LlavaVisionWeights& w, HeldBytes& held) {
  const vision::VisionTowerWeights& t = w.tower;
  held.Add({&t.patch_weight, &t.patch_bias, &t.class_embedding, &t.position_embedding,
            &t.pre_ln_weight, &t.pre_ln_bias});
  for (const vision::EncoderLayerWeights& L : t.layers) {
    held.Add({&L.ln1_weight, &L.ln1_bias,  &L.q_weight,   &L.q_bias,   &L.k_weight,   &L.k_bias,
              &L.v_weight,   &L.v_bias,    &L.out_weight, &L.out_bias, &L.ln2_weight, &L.ln2_bias,
              &L.fc1_weight, &L.fc1_bias,  &L.fc2_weight, &L.fc2_bias, &L.q_scale,    &L.k_scale,
              &L.v_scale,    &L.out_scale, &L.fc1_scale,  &L.fc2_scale});
  }
  const vision::ProjectorWeights& p = w.projector;
  held.Add(
      {&p.linear1_weight, &p.linear1_bias, &p.linear2_weight, &p.linear2_bias, &w.image_newline});
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
