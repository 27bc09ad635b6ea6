// Decoder: construction (shape checks, weights on the device), the one forward and the one layer
// body. What each layer does with a sequence's pages is the KV backend's (kv_backend.h); the entry
// points that lay out a step's rows are in mixed_step.cc.
#include "engine/llm/decoder.h"

#include <cstdlib>
#include <initializer_list>
#include <numeric>
#include <string>
#include <utility>

#include "engine/core/device_memory.h"
#include "engine/ops/activation.h"
#include "engine/ops/embedding.h"
#include "engine/ops/linear.h"
#include "engine/ops/op_checks.h"
#include "engine/ops/rms_norm.h"
#include "engine/ops/rope.h"
#include "engine/ops/row_slices.h"

namespace framezip::engine::llm {
namespace {

Status CheckShape(const Tensor& t, const Shape& want, const std::string& name, bool optional) {
  return ops::CheckWeightShape("decoder weights", t, want, name, optional);
}

// An int8 or FP8 projection needs its scales [N] f32; a 16-bit or f32 one has none.
Status CheckScale(const Tensor& proj, const Tensor& scale, const std::string& name) {
  if (!proj.defined() || !IsQuantizedWeightDType(proj.dtype())) {
    if (scale.defined()) {
      return InvalidArgumentError("decoder weights: {} is {} but has quantisation scales", name,
                                  DTypeName(proj.dtype()));
    }
    return absl::OkStatus();
  }
  FZ_RETURN_IF_ERROR(CheckShape(scale, {proj.dim(0)}, name + " scales", false));
  if (scale.dtype() != DType::kF32) {
    return InvalidArgumentError("decoder weights: {} scales are {}, want f32", name,
                                DTypeName(scale.dtype()));
  }
  return absl::OkStatus();
}

Status CheckWeights(const DecoderShape& s, const DecoderWeights& w) {
  if (static_cast<int64_t>(w.layers.size()) != s.layers) {
    return InvalidArgumentError("decoder: {} layers of weights for {} layers", w.layers.size(),
                                s.layers);
  }
  const int64_t h = s.hidden, q = s.q_dim(), kvd = s.kv_dim(), im = s.intermediate;
  FZ_RETURN_IF_ERROR(CheckShape(w.embed_tokens, {s.vocab, h}, "embed_tokens", false));
  FZ_RETURN_IF_ERROR(CheckShape(w.norm, {h}, "norm", false));
  FZ_RETURN_IF_ERROR(CheckShape(w.lm_head, {s.vocab, h}, "lm_head", false));
  FZ_RETURN_IF_ERROR(CheckScale(w.lm_head, w.lm_head_scale, "lm_head"));
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = fmt::format("layers.{}.", l);
    FZ_RETURN_IF_ERROR(CheckShape(L.input_layernorm, {h}, p + "input_layernorm", false));
    FZ_RETURN_IF_ERROR(
        CheckShape(L.post_attention_layernorm, {h}, p + "post_attention_layernorm", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.q_proj, {q, h}, p + "q_proj", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.k_proj, {kvd, h}, p + "k_proj", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.v_proj, {kvd, h}, p + "v_proj", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.o_proj, {h, q}, p + "o_proj", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.gate_proj, {im, h}, p + "gate_proj", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.up_proj, {im, h}, p + "up_proj", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.down_proj, {h, im}, p + "down_proj", false));
    FZ_RETURN_IF_ERROR(CheckShape(L.q_bias, {q}, p + "q_proj.bias", !s.qkv_bias));
    FZ_RETURN_IF_ERROR(CheckShape(L.k_bias, {kvd}, p + "k_proj.bias", !s.qkv_bias));
    FZ_RETURN_IF_ERROR(CheckShape(L.v_bias, {kvd}, p + "v_proj.bias", !s.qkv_bias));
    FZ_RETURN_IF_ERROR(CheckShape(L.o_bias, {h}, p + "o_proj.bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.gate_bias, {im}, p + "gate_proj.bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.up_bias, {im}, p + "up_proj.bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.down_bias, {h}, p + "down_proj.bias", true));
    for (const auto& proj : LayerProjections(L)) {
      FZ_RETURN_IF_ERROR(CheckScale(*proj.weight, *proj.scale, p + proj.name));
    }
  }
  return absl::OkStatus();
}

// `t` on `device`: itself when it is there already (or undefined), else a copy whose bytes are
// added to `copied`.
StatusOr<Tensor> OnDevice(const Tensor& t, Device device, size_t& copied) {
  if (!t.defined() || t.device() == device) return t;
  FZ_ASSIGN_OR_RETURN(Tensor out, t.To(device));
  copied += out.nbytes();
  return out;
}

StatusOr<LayerWeights> LayerOnDevice(const LayerWeights& L, Device device, size_t& copied) {
  LayerWeights D = L;
  for (Tensor* t : LayerTensors(D)) {
    FZ_ASSIGN_OR_RETURN(*t, OnDevice(*t, device, copied));
  }
  return D;
}

// Rows of `parts` (one dtype and width, on any devices) one after another in one tensor on
// `device`, each copied straight to its place.
StatusOr<Tensor> ConcatRows(std::initializer_list<const Tensor*> parts, Device device,
                            size_t& copied) {
  int64_t rows = 0;
  for (const Tensor* p : parts) rows += p->dim(0);
  const Tensor& first = **parts.begin();
  Shape shape = first.shape();
  shape[0] = rows;
  FZ_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, first.dtype(), device));
  size_t offset = 0;
  for (const Tensor* p : parts) {
    FZ_RETURN_IF_ERROR(CopyBytes(static_cast<char*>(out.raw_data()) + offset, device, p->raw_data(),
                                 p->device(), p->nbytes()));
    offset += p->nbytes();
  }
  copied += out.nbytes();
  return out;
}

// Whether weights [N_i, K] can be stacked by rows: all defined or none, one dtype, one K.
bool SameFormat(std::initializer_list<const Tensor*> parts) {
  const Tensor& first = **parts.begin();
  for (const Tensor* p : parts) {
    if (p->defined() != first.defined()) return false;
    if (p->defined() && (p->dtype() != first.dtype() || p->dim(-1) != first.dim(-1))) return false;
  }
  return true;
}

// Whether per-output-row vectors [N_i] (biases, scales) can be concatenated: all defined or none,
// one dtype (their lengths are the weights' N_i and differ, as q's and k's do).
bool SameVectorFormat(std::initializer_list<const Tensor*> parts) {
  const Tensor& first = **parts.begin();
  for (const Tensor* p : parts) {
    if (p->defined() != first.defined()) return false;
    if (p->defined() && p->dtype() != first.dtype()) return false;
  }
  return true;
}

// Moves L's q/k/v and gate/up into their fused tensors on `device` where they can be fused (one
// dtype per group, every bias of the group present or none, and every scale: a quantised weight's
// scales are per output row, so they concatenate as its rows do), leaving the separate ones
// undefined; returns whether any group was fused.
StatusOr<bool> FuseProjections(LayerWeights& L, Device device, size_t& copied) {
  bool fused = false;
  if (SameFormat({&L.q_proj, &L.k_proj, &L.v_proj}) &&
      SameVectorFormat({&L.q_bias, &L.k_bias, &L.v_bias}) &&
      SameVectorFormat({&L.q_scale, &L.k_scale, &L.v_scale})) {
    FZ_ASSIGN_OR_RETURN(L.qkv_proj, ConcatRows({&L.q_proj, &L.k_proj, &L.v_proj}, device, copied));
    if (L.q_bias.defined()) {
      FZ_ASSIGN_OR_RETURN(L.qkv_bias,
                          ConcatRows({&L.q_bias, &L.k_bias, &L.v_bias}, device, copied));
    }
    if (L.q_scale.defined()) {
      FZ_ASSIGN_OR_RETURN(L.qkv_scale,
                          ConcatRows({&L.q_scale, &L.k_scale, &L.v_scale}, device, copied));
    }
    L.q_proj = L.k_proj = L.v_proj = L.q_bias = L.k_bias = L.v_bias = Tensor();
    L.q_scale = L.k_scale = L.v_scale = Tensor();
    fused = true;
  }
  if (SameFormat({&L.gate_proj, &L.up_proj}) && SameVectorFormat({&L.gate_scale, &L.up_scale}) &&
      !L.gate_bias.defined() && !L.up_bias.defined()) {
    FZ_ASSIGN_OR_RETURN(L.gate_up_proj, ConcatRows({&L.gate_proj, &L.up_proj}, device, copied));
    if (L.gate_scale.defined()) {
      FZ_ASSIGN_OR_RETURN(L.gate_up_scale,
                          ConcatRows({&L.gate_scale, &L.up_scale}, device, copied));
    }
    L.gate_proj = L.up_proj = L.gate_scale = L.up_scale = Tensor();
    fused = true;
  }
  return fused;
}

}  // namespace

StatusOr<std::unique_ptr<Decoder>> Decoder::Create(const DecoderShape& s, DecoderWeights w,
                                                   Device device, ProjectionLayout projections) {
  if (s.hidden <= 0 || s.layers <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0 ||
      s.heads % s.kv_heads != 0 || s.head_dim % 2 != 0 || s.intermediate <= 0 || s.vocab <= 0 ||
      s.rope.head_dim != s.head_dim) {
    return InvalidArgumentError(
        "decoder: bad shape (hidden {}, layers {}, heads {}, kv heads {}, head_dim {}, "
        "intermediate {}, vocab {}, rope head_dim {})",
        s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.vocab,
        s.rope.head_dim);
  }
  FZ_RETURN_IF_ERROR(CheckWeights(s, w));
  const auto any_of_dtype = [&w](DType dtype) {
    if (w.lm_head.dtype() == dtype) return true;
    for (const LayerWeights& L : w.layers) {
      for (const auto& proj : LayerProjections(L)) {
        if (proj.weight->dtype() == dtype) return true;
      }
    }
    return false;
  };
  if (!device.is_cpu() && any_of_dtype(DType::kI8)) {
    return UnimplementedError(
        "decoder: int8 weights (--weight-format int8, or a checkpoint stored in int8) run on the "
        "CPU only (bf16 weights on {}, or fp8 on an sm_90 GPU)",
        DeviceName(device));
  }
  if (any_of_dtype(DType::kF8E4M3) && !ops::Fp8LinearAvailable(device)) {
    return UnimplementedError(
        "decoder: FP8 weights (--weight-format fp8) run on sm_90 GPUs only, not on {} (use bf16, "
        "or int8 on the CPU)",
        DeviceName(device));
  }
  std::unique_ptr<Decoder> d(new Decoder(s, device));
  // FRAMEZIP_EAGER_STEPS=1: every step layer by layer (docs/configuration.md), to compare paths.
  if (const char* eager = std::getenv("FRAMEZIP_EAGER_STEPS"); eager != nullptr && eager[0] == '1') {
    d->step_plans_ = false;
  }
  // What the device's kernels take, before any weight is copied there.
  const bool bf16_attention = !w.layers.empty() && w.layers[0].q_proj.dtype() != DType::kF32;
  FZ_ASSIGN_OR_RETURN(d->kv_, KvBackend::Create(s, device, bf16_attention));
  size_t& copied = d->weight_bytes_;
  FZ_ASSIGN_OR_RETURN(d->weights_.embed_tokens, OnDevice(w.embed_tokens, device, copied));
  FZ_ASSIGN_OR_RETURN(d->weights_.norm, OnDevice(w.norm, device, copied));
  // A tied head is the embedding itself: one device copy serves both (136 M of Qwen2-0.5B's
  // 494 M parameters).
  const bool tied = w.lm_head.raw_data() == w.embed_tokens.raw_data() &&
                    w.lm_head.dtype() == w.embed_tokens.dtype() &&
                    w.lm_head.device() == w.embed_tokens.device();
  if (tied) {
    d->weights_.lm_head = d->weights_.embed_tokens;
  } else {
    FZ_ASSIGN_OR_RETURN(d->weights_.lm_head, OnDevice(w.lm_head, device, copied));
  }
  FZ_ASSIGN_OR_RETURN(d->weights_.lm_head_scale, OnDevice(w.lm_head_scale, device, copied));
  if (d->weights_.lm_head_scale.defined()) {
    FZ_ASSIGN_OR_RETURN(d->weights_.lm_head,
                        ops::PackLinearWeight(d->weights_.lm_head, d->weights_.lm_head_scale));
  }
  const bool fuse = projections == ProjectionLayout::kFused ||
                    (projections == ProjectionLayout::kDeviceDefault && !device.is_cpu());
  for (LayerWeights& L : w.layers) {
    if (fuse) {
      FZ_ASSIGN_OR_RETURN(const bool fused, FuseProjections(L, device, copied));
      d->fused_projections_ = d->fused_projections_ || fused;
    }
    FZ_ASSIGN_OR_RETURN(LayerWeights D, LayerOnDevice(L, device, copied));
    D.qkv_proj = std::move(L.qkv_proj);
    D.qkv_bias = std::move(L.qkv_bias);
    D.gate_up_proj = std::move(L.gate_up_proj);
    D.qkv_scale = std::move(L.qkv_scale);
    D.gate_up_scale = std::move(L.gate_up_scale);
    for (const auto& [t, scale] : {std::pair{&D.q_proj, &D.q_scale},
                                   {&D.k_proj, &D.k_scale},
                                   {&D.v_proj, &D.v_scale},
                                   {&D.o_proj, &D.o_scale},
                                   {&D.gate_proj, &D.gate_scale},
                                   {&D.up_proj, &D.up_scale},
                                   {&D.down_proj, &D.down_scale},
                                   {&D.qkv_proj, &D.qkv_scale},
                                   {&D.gate_up_proj, &D.gate_up_scale}}) {
      // The GEMMs' layout, now rather than at a request; int8 weights are kept in it only.
      if (t->defined()) {
        FZ_ASSIGN_OR_RETURN(*t, ops::PackLinearWeight(*t, *scale));
      }
    }
    d->weights_.layers.push_back(std::move(D));
  }
  return d;
}

kv::PageLayout Decoder::KvLayout(kv::KvFormat format, int page_tokens) const {
  return kv::PageLayout{page_tokens, static_cast<int>(shape_.kv_heads),
                        static_cast<int>(shape_.head_dim), format};
}

StatusOr<std::unique_ptr<Sequence>> Decoder::SequenceWithPolicy(
    const compress::PolicyConfig& policy) const {
  auto seq = std::make_unique<Sequence>();
  FZ_ASSIGN_OR_RETURN(seq->policy, compress::CreatePolicy(policy, policy_resources_));
  const int select = seq->policy->RowSelectionLayer();
  if (select >= shape_.layers) {
    return InvalidArgumentError("policy {} selects rows at layer {}; the model has {} layers",
                                compress::FormatPolicyConfig(policy), select, shape_.layers);
  }
  return seq;
}

StatusOr<std::unique_ptr<Sequence>> Decoder::NewSequence(kv::PagePool* pool,
                                                         std::string_view policy) const {
  FZ_ASSIGN_OR_RETURN(const compress::PolicyConfig config, compress::ParsePolicyConfig(policy));
  return NewSequence(pool, config);
}

StatusOr<std::unique_ptr<Sequence>> Decoder::NewSequence(const kv::KvPools& pools,
                                                         kv::KvFormat full,
                                                         std::string_view policy) const {
  FZ_ASSIGN_OR_RETURN(const compress::PolicyConfig config, compress::ParsePolicyConfig(policy));
  return NewSequence(pools, full, config);
}

StatusOr<std::unique_ptr<Sequence>> Decoder::NewSequence(
    kv::PagePool* pool, const compress::PolicyConfig& policy) const {
  FZ_RETURN_IF_ERROR(kv_->CheckPool(pool->layout(), pool->device()));
  FZ_ASSIGN_OR_RETURN(auto seq, SequenceWithPolicy(policy));
  const kv::KvPrecision want = seq->policy->Precision(pool->format());
  for (const kv::KvFormat f : {want.full, want.important, want.rest}) {
    if (f != pool->format()) {
      return InvalidArgumentError("policy {} stores {} pages; this KV pool holds only {} pages",
                                  compress::FormatPolicyConfig(policy), kv::KvFormatName(f),
                                  kv::KvFormatName(pool->format()));
    }
  }
  seq->kv = kv::SequenceKv(pool, static_cast<int>(shape_.layers));
  return seq;
}

StatusOr<std::unique_ptr<Sequence>> Decoder::NewSequence(
    const kv::KvPools& pools, kv::KvFormat full, const compress::PolicyConfig& policy) const {
  for (const kv::KvFormat f : pools.formats()) {
    FZ_RETURN_IF_ERROR(kv_->CheckPool(pools.pool(f)->layout(), pools.pool(f)->device()));
  }
  FZ_ASSIGN_OR_RETURN(auto seq, SequenceWithPolicy(policy));
  FZ_ASSIGN_OR_RETURN(seq->kv, kv::SequenceKv::Create(pools, static_cast<int>(shape_.layers),
                                                      seq->policy->Precision(full)));
  return seq;
}

StatusOr<Tensor> Decoder::Empty(Shape shape, DType dtype) const {
  return Tensor::Empty(std::move(shape), dtype, device_);
}

Status Decoder::Embed(const Tensor& ids, Tensor& out) const {
  if (ids.device() == device_) return ops::Embedding(weights_.embed_tokens, ids, out);
  if (!ids.device().is_cpu()) {
    FZ_ASSIGN_OR_RETURN(const Tensor here, ids.To(device_));
    return ops::Embedding(weights_.embed_tokens, here, out);
  }
  // Host ids going to a GPU: checked here, so they go up once, without a wait, and never come
  // back to be checked.
  if (ids.dtype() != DType::kI32) {
    return InvalidArgumentError("Embed: ids have dtype {}, want i32", DTypeName(ids.dtype()));
  }
  const std::span<const int32_t> host(ids.data<int32_t>(), static_cast<size_t>(ids.numel()));
  FZ_ASSIGN_OR_RETURN(const Tensor here, kv_->UploadInts(host));
  FZ_ASSIGN_OR_RETURN(const Tensor shaped, here.Reshape(ids.shape()));
  return ops::Embedding(weights_.embed_tokens, shaped, host, out);
}

StatusOr<Tensor> Decoder::Embed(std::span<const int32_t> ids) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  FZ_ASSIGN_OR_RETURN(Tensor idt, Tensor::Empty({n}, DType::kI32));
  std::copy(ids.begin(), ids.end(), idt.data<int32_t>());
  FZ_ASSIGN_OR_RETURN(Tensor out, Empty({n, shape_.hidden}));
  FZ_RETURN_IF_ERROR(Embed(idt, out));
  return out;
}

std::vector<StepDemand> Decoder::StepDemands(std::span<Sequence* const> decode,
                                             std::span<const PrefillPart> parts) {
  std::vector<StepDemand> demands;
  for (Sequence* s : decode) demands.push_back(StepDemand{s, 1, false});
  for (const PrefillPart& part : parts) demands.push_back(StepDemand{part.seq, part.rows, true});
  return demands;
}

Status Decoder::Forward(const StepRows& input_rows, Tensor& x, const LayerObserver& observer,
                        std::vector<int64_t>* row_map, const DecodeStepPlan* plan) const {
  const int64_t t = x.dim(0);
  // Every sequence's pages for the step before any layer writes: a step the pools cannot serve
  // fails here with every cache as it was. (A planned step's caller reserved them.)
  StepReservation reservation;
  Tensor positions;
  if (plan != nullptr) {
    positions = plan->positions();
  } else {
    FZ_RETURN_IF_ERROR(
        kv_->Reserve(StepDemands(input_rows.decode, input_rows.parts), reservation));
    FZ_ASSIGN_OR_RETURN(positions,
                        kv_->UploadInts(input_rows.host_positions.first(static_cast<size_t>(t))));
  }
  StepRows rows = input_rows;
  RemainingRows remaining;
  std::vector<int64_t> local_map;
  std::vector<int64_t>& map = row_map != nullptr ? *row_map : local_map;
  map.resize(static_cast<size_t>(t));
  std::iota(map.begin(), map.end(), int64_t{0});
  const auto run_layers = [&]() -> Status {
    for (int64_t l = 0; l < shape_.layers; ++l) {
      const int64_t before = x.dim(0);
      FZ_RETURN_IF_ERROR(SelectRows(static_cast<int>(l), rows, x, positions, remaining, map));
      if (observer && x.dim(0) != before) {
        return FailedPreconditionError(
            "hidden states per layer are not available when the policy removes rows");
      }
      FZ_RETURN_IF_ERROR(RunLayer(static_cast<int>(l), rows, positions, x, plan));
      if (observer && l + 1 < shape_.layers) FZ_RETURN_IF_ERROR(observer(l + 1, x));
    }
    return absl::OkStatus();
  };
  const Status ran = run_layers();
  // AttentionPack's statistics of the layers that ran reach the policy now, also when a layer
  // failed, so no later reader of the blocks sees them half applied (the layer's error first).
  const Status settled = kv_->SettleStatistics(input_rows.decode);
  FZ_RETURN_IF_ERROR(ran);
  FZ_RETURN_IF_ERROR(settled);
  // Positions consumed: every input row, removed or not.
  for (Sequence* s : input_rows.decode) ++s->length;
  for (const PrefillPart& part : input_rows.parts) {
    part.seq->length += part.rows;
    part.seq->prefill_stats.fed += part.rows;
  }
  return absl::OkStatus();
}

Status Decoder::RunLayer(int l, const StepRows& rows, const Tensor& positions, Tensor& x,
                         const DecodeStepPlan* plan) const {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
  const int64_t t = x.dim(0), nh = shape_.heads, g = shape_.kv_heads, d = shape_.head_dim;

  // Attention block: h = RMSNorm(x); q/k/v; RoPE (per row, each at its own sequence's position,
  // so on all rows at once); each sequence's attention middle; x += o_proj(attn).
  FZ_ASSIGN_OR_RETURN(Tensor h, Empty({t, shape_.hidden}));
  FZ_RETURN_IF_ERROR(ops::RmsNorm(x, w.input_layernorm, shape_.rms_eps, h));
  FZ_ASSIGN_OR_RETURN(Tensor q, Empty({t, nh, d}));
  FZ_ASSIGN_OR_RETURN(Tensor k, Empty({t, g, d}));
  FZ_ASSIGN_OR_RETURN(Tensor v, Empty({t, g, d}));
  if (w.qkv_proj.defined()) {
    FZ_ASSIGN_OR_RETURN(Tensor qkv, Empty({t, (nh + 2 * g) * d}));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.qkv_proj, w.qkv_scale, w.qkv_bias, qkv));
    FZ_RETURN_IF_ERROR(
        ops::RopeSplitQkv(qkv, positions, shape_.rope, rows.host_positions, q, k, v));
  } else {
    FZ_ASSIGN_OR_RETURN(Tensor q2, q.Reshape({t, nh * d}));
    FZ_ASSIGN_OR_RETURN(Tensor k2, k.Reshape({t, g * d}));
    FZ_ASSIGN_OR_RETURN(Tensor v2, v.Reshape({t, g * d}));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.q_proj, w.q_scale, w.q_bias, q2));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.k_proj, w.k_scale, w.k_bias, k2));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.v_proj, w.v_scale, w.v_bias, v2));
    FZ_RETURN_IF_ERROR(ops::ApplyRope(q, positions, shape_.rope, rows.host_positions));
    FZ_RETURN_IF_ERROR(ops::ApplyRope(k, positions, shape_.rope, rows.host_positions));
  }

  FZ_ASSIGN_OR_RETURN(Tensor attn, Empty({t, nh, d}));
  if (!rows.decode.empty()) {
    const int64_t b = static_cast<int64_t>(rows.decode.size());
    FZ_ASSIGN_OR_RETURN(const Tensor decode_q, q.Slice(0, b));
    FZ_ASSIGN_OR_RETURN(const Tensor decode_k, k.Slice(0, b));
    FZ_ASSIGN_OR_RETURN(const Tensor decode_v, v.Slice(0, b));
    FZ_ASSIGN_OR_RETURN(Tensor decode_attn, attn.Slice(0, b));
    if (plan != nullptr) {
      FZ_RETURN_IF_ERROR(kv_->AttendDecodePlanned(l, rows.decode, *plan, decode_q, decode_k,
                                                  decode_v, decode_attn));
    } else {
      FZ_RETURN_IF_ERROR(kv_->AttendDecodeRows(l, rows.decode, rows.host_positions.first(b),
                                               decode_q, decode_k, decode_v, decode_attn));
    }
  }
  for (const PrefillPart& part : rows.parts) {
    const int64_t r0 = part.row0, r1 = part.row0 + part.rows;
    FZ_ASSIGN_OR_RETURN(const Tensor part_q, q.Slice(r0, r1));
    FZ_ASSIGN_OR_RETURN(const Tensor part_k, k.Slice(r0, r1));
    FZ_ASSIGN_OR_RETURN(const Tensor part_v, v.Slice(r0, r1));
    FZ_ASSIGN_OR_RETURN(Tensor part_attn, attn.Slice(r0, r1));
    FZ_RETURN_IF_ERROR(kv_->AttendPrefillChunk(l, *part.seq,
                                               rows.host_positions.subspan(r0, part.rows),
                                               part.visual, part_q, part_k, part_v, part_attn));
  }
  FZ_ASSIGN_OR_RETURN(const Tensor attn2, attn.Reshape({t, nh * d}));
  FZ_RETURN_IF_ERROR(ops::Linear(attn2, w.o_proj, w.o_scale, w.o_bias, h));
  // x += h and h = RMSNorm(x) in one pass over the rows (on the CPU exactly Add then RmsNorm).
  FZ_RETURN_IF_ERROR(ops::AddRmsNorm(x, h, w.post_attention_layernorm, shape_.rms_eps, h));

  // MLP block: x += down(silu(gate(h)) ⊙ up(h)).
  FZ_ASSIGN_OR_RETURN(Tensor gate, Empty({t, shape_.intermediate}));
  if (w.gate_up_proj.defined()) {
    FZ_ASSIGN_OR_RETURN(Tensor gate_up, Empty({t, 2 * shape_.intermediate}));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.gate_up_proj, w.gate_up_scale, Tensor(), gate_up));
    FZ_RETURN_IF_ERROR(ops::SiluMulHalves(gate_up, gate));
  } else {
    FZ_ASSIGN_OR_RETURN(Tensor up, Empty({t, shape_.intermediate}));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.gate_proj, w.gate_scale, w.gate_bias, gate));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.up_proj, w.up_scale, w.up_bias, up));
    FZ_RETURN_IF_ERROR(ops::SiluMul(gate, up, gate));
  }
  FZ_RETURN_IF_ERROR(ops::Linear(gate, w.down_proj, w.down_scale, w.down_bias, h));
  return ops::Add(x, h, x);
}

StatusOr<Tensor> Decoder::Logits(const Tensor& x) const {
  FZ_ASSIGN_OR_RETURN(Tensor normed, Empty(x.shape()));
  FZ_RETURN_IF_ERROR(ops::RmsNorm(x, weights_.norm, shape_.rms_eps, normed));
  FZ_ASSIGN_OR_RETURN(Tensor logits, Empty({x.dim(0), shape_.vocab}));
  FZ_RETURN_IF_ERROR(
      ops::Linear(normed, weights_.lm_head, weights_.lm_head_scale, Tensor(), logits));
  return logits;
}

StatusOr<Tensor> Decoder::LogitsOfRows(const Tensor& x, std::span<const int64_t> rows) const {
  // One gather of the wanted rows, then lm_head once over them (not over every row of x).
  const int64_t m = static_cast<int64_t>(rows.size()), hid = shape_.hidden;
  // Every row of x in order (a decode step): no gather, and on a GPU no row list to send.
  bool all_rows = m == x.dim(0);
  for (int64_t i = 0; all_rows && i < m; ++i) all_rows = rows[static_cast<size_t>(i)] == i;
  if (all_rows) return Logits(x);
  std::vector<int32_t> index(rows.begin(), rows.end());
  FZ_ASSIGN_OR_RETURN(Tensor picked, Empty({m, hid}));
  FZ_RETURN_IF_ERROR(ops::CopyRowSlices(device_, m, hid,
                                        {.data = x.data<float>(), .stride = hid, .rows = index},
                                        {.data = picked.data<float>(), .stride = hid}));
  return Logits(picked);
}

}  // namespace framezip::engine::llm
