#include "engine/llm/decoder.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/core/half.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/attention_sparse.h"
#include "engine/ops/embedding.h"
#include "engine/ops/linear.h"
#include "engine/ops/op_checks.h"
#include "engine/ops/paged_attention.h"
#include "engine/ops/rms_norm.h"
#include "engine/ops/rope.h"

namespace framezip::engine::llm {
namespace {

// The policy's treatment of U rows in the sparse attention op's terms.
ops::RestRows RestRowsOf(const compress::PrefillLayerPlan& plan) {
  switch (plan.u_rows) {
    case compress::URows::kAttendImportant:
      return {ops::RestRows::Mode::kImportant, {}};
    case compress::URows::kLocal:
      return {ops::RestRows::Mode::kLocal, {plan.u_window, plan.u_sinks}};
    case compress::URows::kSkip:
      break;
  }
  return {};
}

Status CheckShape(const Tensor& t, const Shape& want, const std::string& name, bool optional) {
  return ops::CheckWeightShape("decoder weights", t, want, name, optional);
}

StatusOr<Tensor> Alloc(Shape shape, DType dtype = DType::kF32) {
  return Tensor::Empty(std::move(shape), dtype);
}

Tensor Positions(int64_t start, int64_t count) {
  Tensor t = *Tensor::Empty({count}, DType::kI32);
  for (int64_t i = 0; i < count; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(start + i);
  return t;
}

// x += y (same shape).
Status AddInPlace(Tensor& x, const Tensor& y) { return ops::Add(x, y, x); }

// SwiGLU MLP on h [T, H] -> out [T, H].
Status Mlp(const model::TextLayerWeights& w, int64_t inter, const Tensor& h, Tensor& out) {
  const int64_t t = h.dim(0);
  FZ_ASSIGN_OR_RETURN(Tensor gate, Alloc({t, inter}));
  FZ_ASSIGN_OR_RETURN(Tensor up, Alloc({t, inter}));
  FZ_RETURN_IF_ERROR(ops::Linear(h, w.gate_proj, w.gate_bias, gate));
  FZ_RETURN_IF_ERROR(ops::Linear(h, w.up_proj, w.up_bias, up));
  FZ_RETURN_IF_ERROR(ops::SiluMul(gate, up, gate));
  return ops::Linear(gate, w.down_proj, w.down_bias, out);
}

}  // namespace

ops::RopeParams RopeParamsOf(const model::TextConfig& c) {
  ops::RopeParams p;
  p.head_dim = static_cast<int>(c.head_dim);
  p.theta = c.rope_theta;
  if (c.rope_scaling.type == model::RopeScaling::Type::kLlama3) {
    p.llama3_factor = c.rope_scaling.factor;
    p.llama3_low_freq_factor = c.rope_scaling.low_freq_factor;
    p.llama3_high_freq_factor = c.rope_scaling.high_freq_factor;
    p.llama3_original_max_positions =
        static_cast<double>(c.rope_scaling.original_max_position_embeddings);
  }
  return p;
}

StatusOr<DecoderWeights> DecoderWeightsFromModel(const model::ModelWeights& weights,
                                                 const model::TextConfig& config) {
  DecoderWeights d;
  d.embed_tokens = weights.Get(model::TextName("embed_tokens.weight"));
  d.norm = weights.Get(model::TextName("norm.weight"));
  const Tensor* head = weights.Find(model::kLmHead);
  d.lm_head = head != nullptr ? *head : d.embed_tokens;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) d.layers.push_back(weights.TextLayer(l));
  return d;
}

Decoder::Decoder(model::TextConfig config, DecoderWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {}

StatusOr<std::unique_ptr<Decoder>> Decoder::Create(const model::TextConfig& c, DecoderWeights w) {
  if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 ||
      c.head_dim <= 0 || c.num_attention_heads % c.num_key_value_heads != 0 ||
      c.head_dim % 2 != 0) {
    return InvalidArgumentError(
        "decoder: bad config (hidden {}, heads {}, kv heads {}, head_dim {})", c.hidden_size,
        c.num_attention_heads, c.num_key_value_heads, c.head_dim);
  }
  if (static_cast<int64_t>(w.layers.size()) != c.num_hidden_layers) {
    return InvalidArgumentError("decoder: {} layers of weights for num_hidden_layers {}",
                                w.layers.size(), c.num_hidden_layers);
  }
  const int64_t h = c.hidden_size, q = c.q_dim(), kvd = c.kv_dim(), im = c.intermediate_size;
  FZ_RETURN_IF_ERROR(CheckShape(w.embed_tokens, {c.vocab_size, h}, "embed_tokens", false));
  FZ_RETURN_IF_ERROR(CheckShape(w.norm, {h}, "norm", false));
  FZ_RETURN_IF_ERROR(CheckShape(w.lm_head, {c.vocab_size, h}, "lm_head", false));
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const auto& L = w.layers[l];
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
    FZ_RETURN_IF_ERROR(CheckShape(L.q_bias, {q}, p + "q_proj.bias", !c.qkv_bias));
    FZ_RETURN_IF_ERROR(CheckShape(L.k_bias, {kvd}, p + "k_proj.bias", !c.qkv_bias));
    FZ_RETURN_IF_ERROR(CheckShape(L.v_bias, {kvd}, p + "v_proj.bias", !c.qkv_bias));
    FZ_RETURN_IF_ERROR(CheckShape(L.o_bias, {h}, p + "o_proj.bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.gate_bias, {im}, p + "gate_proj.bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.up_bias, {im}, p + "up_proj.bias", true));
    FZ_RETURN_IF_ERROR(CheckShape(L.down_bias, {h}, p + "down_proj.bias", true));
  }
  if (c.hidden_act != model::Activation::kSilu) {
    return UnimplementedError("decoder: hidden_act {} (only silu)",
                              model::ActivationName(c.hidden_act));
  }
  if (c.use_sliding_window) {
    return UnimplementedError("decoder: sliding-window attention is not implemented");
  }
  return std::unique_ptr<Decoder>(new Decoder(c, std::move(w)));
}

kv::PageLayout Decoder::KvLayout(kv::KvFormat format, int page_tokens) const {
  return kv::PageLayout{page_tokens, static_cast<int>(config_.num_key_value_heads),
                        static_cast<int>(config_.head_dim), format};
}

Status Decoder::CheckKvShape(const kv::PageLayout& pl) const {
  if (pl.num_kv_heads != config_.num_key_value_heads || pl.head_dim != config_.head_dim) {
    return InvalidArgumentError("KV pool has {} heads × {} dims, model needs {} × {}",
                                pl.num_kv_heads, pl.head_dim, config_.num_key_value_heads,
                                config_.head_dim);
  }
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<Sequence>> Decoder::NewSequence(kv::PagePool* pool,
                                                         std::string_view policy) const {
  FZ_RETURN_IF_ERROR(CheckKvShape(pool->layout()));
  auto seq = std::make_unique<Sequence>();
  FZ_ASSIGN_OR_RETURN(seq->policy, compress::CreatePolicy(policy));
  const kv::KvPrecision want = seq->policy->Precision(pool->format());
  for (const kv::KvFormat f : {want.full, want.important, want.rest}) {
    if (f != pool->format()) {
      return InvalidArgumentError("policy {} stores {} pages; this KV pool holds only {} pages",
                                  policy, kv::KvFormatName(f), kv::KvFormatName(pool->format()));
    }
  }
  seq->kv = kv::SequenceKv(pool, static_cast<int>(config_.num_hidden_layers));
  return seq;
}

StatusOr<std::unique_ptr<Sequence>> Decoder::NewSequence(const kv::KvPools& pools,
                                                         kv::KvFormat full,
                                                         std::string_view policy) const {
  FZ_RETURN_IF_ERROR(CheckKvShape(pools.base_layout()));
  auto seq = std::make_unique<Sequence>();
  FZ_ASSIGN_OR_RETURN(seq->policy, compress::CreatePolicy(policy));
  FZ_ASSIGN_OR_RETURN(seq->kv, kv::SequenceKv::Create(pools,
                                                      static_cast<int>(config_.num_hidden_layers),
                                                      seq->policy->Precision(full)));
  return seq;
}

Status Decoder::Embed(const Tensor& ids, Tensor& out) const {
  return ops::Embedding(weights_.embed_tokens, ids, out);
}

StatusOr<Tensor> Decoder::Embed(std::span<const int32_t> ids) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  FZ_ASSIGN_OR_RETURN(Tensor idt, Alloc({n}, DType::kI32));
  std::copy(ids.begin(), ids.end(), idt.data<int32_t>());
  FZ_ASSIGN_OR_RETURN(Tensor out, Alloc({n, config_.hidden_size}));
  FZ_RETURN_IF_ERROR(Embed(idt, out));
  return out;
}

Status Decoder::RunLayer(int l, std::span<Sequence* const> decode,
                         std::span<const PrefillPart> parts, const Tensor& positions,
                         Tensor& x) const {
  const auto& w = weights_.layers[l];
  const int64_t t = x.dim(0), hid = config_.hidden_size, nh = config_.num_attention_heads,
                g = config_.num_key_value_heads, d = config_.head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  FZ_ASSIGN_OR_RETURN(Tensor h, Alloc({t, hid}));
  FZ_RETURN_IF_ERROR(ops::RmsNorm(x, w.input_layernorm, eps, h));
  FZ_ASSIGN_OR_RETURN(Tensor q, Alloc({t, nh, d}));
  FZ_ASSIGN_OR_RETURN(Tensor k, Alloc({t, g, d}));
  FZ_ASSIGN_OR_RETURN(Tensor v, Alloc({t, g, d}));
  {
    FZ_ASSIGN_OR_RETURN(Tensor q2, q.Reshape({t, nh * d}));
    FZ_ASSIGN_OR_RETURN(Tensor k2, k.Reshape({t, g * d}));
    FZ_ASSIGN_OR_RETURN(Tensor v2, v.Reshape({t, g * d}));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.q_proj, w.q_bias, q2));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.k_proj, w.k_bias, k2));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.v_proj, w.v_bias, v2));
  }
  // RoPE is per row (each row at its own sequence's position), so it runs on all rows at once.
  const ops::RopeParams rope = RopeParamsOf(config_);
  FZ_RETURN_IF_ERROR(ops::ApplyRope(q, positions, rope));
  FZ_RETURN_IF_ERROR(ops::ApplyRope(k, positions, rope));

  FZ_ASSIGN_OR_RETURN(Tensor attn, Alloc({t, nh, d}));
  if (!decode.empty()) {
    const int64_t b = static_cast<int64_t>(decode.size());
    FZ_ASSIGN_OR_RETURN(const Tensor decode_positions, positions.Slice(0, b));
    FZ_ASSIGN_OR_RETURN(const Tensor decode_q, q.Slice(0, b));
    FZ_ASSIGN_OR_RETURN(const Tensor decode_k, k.Slice(0, b));
    FZ_ASSIGN_OR_RETURN(const Tensor decode_v, v.Slice(0, b));
    FZ_ASSIGN_OR_RETURN(Tensor decode_attn, attn.Slice(0, b));
    FZ_RETURN_IF_ERROR(
        AttendDecodeRows(l, decode, decode_positions, decode_q, decode_k, decode_v, decode_attn));
  }
  for (const PrefillPart& part : parts) {
    const int64_t r0 = part.row0, r1 = part.row0 + part.rows;
    FZ_ASSIGN_OR_RETURN(const Tensor part_positions, positions.Slice(r0, r1));
    FZ_ASSIGN_OR_RETURN(const Tensor part_q, q.Slice(r0, r1));
    FZ_ASSIGN_OR_RETURN(const Tensor part_k, k.Slice(r0, r1));
    FZ_ASSIGN_OR_RETURN(const Tensor part_v, v.Slice(r0, r1));
    FZ_ASSIGN_OR_RETURN(Tensor part_attn, attn.Slice(r0, r1));
    FZ_RETURN_IF_ERROR(AttendPrefillChunk(l, *part.seq, part_positions, part.visual, part_q,
                                          part_k, part_v, part_attn));
  }

  FZ_ASSIGN_OR_RETURN(Tensor attn2, attn.Reshape({t, nh * d}));
  FZ_RETURN_IF_ERROR(ops::Linear(attn2, w.o_proj, w.o_bias, h));
  FZ_RETURN_IF_ERROR(AddInPlace(x, h));
  FZ_ASSIGN_OR_RETURN(Tensor h2, Alloc({t, hid}));
  FZ_RETURN_IF_ERROR(ops::RmsNorm(x, w.post_attention_layernorm, eps, h2));
  FZ_RETURN_IF_ERROR(Mlp(w, config_.intermediate_size, h2, h));
  return AddInPlace(x, h);
}

Status Decoder::AttendPrefillChunk(int l, Sequence& seq, const Tensor& positions,
                                   const uint8_t* visual, const Tensor& q, const Tensor& k,
                                   const Tensor& v, Tensor& attn) const {
  const int64_t t = q.dim(0), nh = config_.num_attention_heads, g = config_.num_key_value_heads,
                d = config_.head_dim;
  const int64_t past = seq.kv.num_tokens(l);
  compress::PrefillLayerPlan plan;
  plan.classes.assign(static_cast<size_t>(t), kv::kFull);
  const auto t_select = std::chrono::steady_clock::now();
  FZ_RETURN_IF_ERROR(seq.policy->PlanPrefillLayer(
      compress::PrefillLayerInputs{l, &q, &k, &v, positions.data<int32_t>(), past, visual,
                                   static_cast<int>(config_.num_hidden_layers)},
      plan));
  compress::PrefillStats& stats = seq.prefill_stats;
  stats.selection_ms += std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - t_select)
                            .count();
  if (plan.classes.size() != static_cast<size_t>(t)) {
    return InternalError("policy {}: {} token classes for {} tokens", seq.policy->name(),
                         plan.classes.size(), t);
  }
  if (stats.tokens.size() != static_cast<size_t>(config_.num_hidden_layers)) {
    stats.Reset(static_cast<int>(config_.num_hidden_layers));
  }
  stats.tokens[l] += t;
  for (uint8_t c : plan.classes) stats.kept[l] += (c == kv::kFull || c == kv::kImportant) ? 1 : 0;

  // Earlier chunks' keys (all at earlier positions) come first in the attention's key sequence.
  Tensor past_k, past_v;
  if (past > 0) {
    FZ_ASSIGN_OR_RETURN(past_k, Alloc({1, past + t, g, d}));
    FZ_ASSIGN_OR_RETURN(past_v, Alloc({1, past + t, g, d}));
    seq.kv.Gather(l, past_k.data<float>(), past_v.data<float>());
  }
  if (plan.sparse) {
    // ZipVL / FastV: attention over the compacted important rows only (engine/ops/
    // attention_sparse.h); the linear layers and the MLP stay dense.
    std::vector<std::vector<int32_t>> shared;
    std::span<const std::vector<int32_t>> important = plan.important_per_kv_head;
    if (important.empty()) {
      shared.push_back(std::move(plan.important));
      important = shared;
    }
    FZ_RETURN_IF_ERROR(ops::SparsePrefillAttention(
        q, k, v, past > 0 ? past_k.data<float>() : nullptr,
        past > 0 ? past_v.data<float>() : nullptr, past, important, RestRowsOf(plan), attn));
  } else {
    FZ_ASSIGN_OR_RETURN(Tensor q4, q.Reshape({1, t, nh, d}));
    FZ_ASSIGN_OR_RETURN(Tensor attn4, attn.Reshape({1, t, nh, d}));
    if (past == 0) {
      FZ_ASSIGN_OR_RETURN(Tensor k4, k.Reshape({1, t, g, d}));
      FZ_ASSIGN_OR_RETURN(Tensor v4, v.Reshape({1, t, g, d}));
      FZ_RETURN_IF_ERROR(ops::CausalAttention(q4, k4, v4, attn4));
    } else {
      std::memcpy(past_k.data<float>() + past * g * d, k.raw_data(), k.nbytes());
      std::memcpy(past_v.data<float>() + past * g * d, v.raw_data(), v.nbytes());
      FZ_RETURN_IF_ERROR(ops::CausalAttention(q4, past_k, past_v, attn4));
    }
  }
  return seq.kv.Append(l, k.data<float>(), v.data<float>(), positions.data<int32_t>(), t,
                       plan.classes.data());
}

StatusOr<Tensor> Decoder::Logits(const Tensor& x) const {
  FZ_ASSIGN_OR_RETURN(Tensor normed, Alloc(x.shape()));
  FZ_RETURN_IF_ERROR(
      ops::RmsNorm(x, weights_.norm, static_cast<float>(config_.rms_norm_eps), normed));
  FZ_ASSIGN_OR_RETURN(Tensor logits, Alloc({x.dim(0), config_.vocab_size}));
  FZ_RETURN_IF_ERROR(ops::Linear(normed, weights_.lm_head, Tensor(), logits));
  return logits;
}

StatusOr<Tensor> Decoder::Prefill(Sequence& seq, const Tensor& embeds,
                                  const PrefillOptions& options) const {
  const int64_t hid = config_.hidden_size;
  if (embeds.rank() != 2 || embeds.dim(1) != hid || embeds.dtype() != DType::kF32 ||
      embeds.dim(0) == 0) {
    return InvalidArgumentError("Prefill: embeds has shape {} ({}), want [T > 0, {}] f32",
                                ShapeString(embeds.shape()), DTypeName(embeds.dtype()), hid);
  }
  const int64_t total = embeds.dim(0);
  if (!options.visual.empty() && static_cast<int64_t>(options.visual.size()) != total) {
    return InvalidArgumentError("Prefill: visual mask has {} entries for {} tokens",
                                options.visual.size(), total);
  }
  const int64_t chunk = options.chunk_tokens > 0 ? options.chunk_tokens : total;
  const int64_t layers = config_.num_hidden_layers;
  if (options.hidden_states != nullptr) {
    options.hidden_states->clear();
    for (int64_t i = 0; i <= layers; ++i) {
      FZ_ASSIGN_OR_RETURN(Tensor hs, Alloc({total, hid}));
      options.hidden_states->push_back(hs);
    }
  }
  FZ_ASSIGN_OR_RETURN(Tensor logits, Alloc({options.all_logits ? total : 1, config_.vocab_size}));
  for (int64_t c0 = 0; c0 < total; c0 += chunk) {
    const int64_t t = std::min(chunk, total - c0);
    FZ_ASSIGN_OR_RETURN(Tensor x, Alloc({t, hid}));
    std::memcpy(x.raw_data(), static_cast<const float*>(embeds.raw_data()) + c0 * hid, x.nbytes());
    const Tensor positions = Positions(seq.length, t);
    auto record = [&](int64_t index, const Tensor& value) {
      if (options.hidden_states == nullptr) return;
      std::memcpy((*options.hidden_states)[index].data<float>() + c0 * hid, value.raw_data(),
                  value.nbytes());
    };
    record(0, x);
    const PrefillPart part{&seq, 0, t,
                           options.visual.empty() ? nullptr : options.visual.data() + c0};
    for (int64_t l = 0; l < layers; ++l) {
      FZ_RETURN_IF_ERROR(RunLayer(static_cast<int>(l), {}, {&part, 1}, positions, x));
      if (l + 1 < layers) record(l + 1, x);
    }
    seq.length += t;
    if (options.hidden_states != nullptr) {
      FZ_ASSIGN_OR_RETURN(Tensor normed, Alloc({t, hid}));
      FZ_RETURN_IF_ERROR(
          ops::RmsNorm(x, weights_.norm, static_cast<float>(config_.rms_norm_eps), normed));
      record(layers, normed);
    }
    if (options.all_logits) {
      FZ_ASSIGN_OR_RETURN(Tensor part, Logits(x));
      std::memcpy(logits.data<float>() + c0 * config_.vocab_size, part.raw_data(), part.nbytes());
    } else if (c0 + t == total) {
      FZ_ASSIGN_OR_RETURN(Tensor last, x.Slice(t - 1, t));
      FZ_ASSIGN_OR_RETURN(logits, Logits(last));
    }
  }
  return logits;
}

StatusOr<std::vector<Tensor>> Decoder::PrefillBatch(std::span<Sequence* const> seqs,
                                                    std::span<const Tensor> embeds,
                                                    std::span<const PrefillOptions> options) const {
  const size_t n = seqs.size();
  const int64_t hid = config_.hidden_size, vocab = config_.vocab_size;
  if (n == 0 || embeds.size() != n || (!options.empty() && options.size() != n)) {
    return InvalidArgumentError("PrefillBatch: {} sequences, {} embeddings, {} options", n,
                                embeds.size(), options.size());
  }
  const PrefillOptions defaults;
  auto option = [&](size_t i) -> const PrefillOptions& {
    return options.empty() ? defaults : options[i];
  };
  std::vector<int64_t> total(n), chunk(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& e = embeds[i];
    if (e.rank() != 2 || e.dim(1) != hid || e.dtype() != DType::kF32 || e.dim(0) == 0) {
      return InvalidArgumentError(
          "PrefillBatch: embeds[{}] has shape {} ({}), want [T > 0, {}] f32", i,
          ShapeString(e.shape()), DTypeName(e.dtype()), hid);
    }
    const PrefillOptions& o = option(i);
    if (o.hidden_states != nullptr) {
      return InvalidArgumentError("PrefillBatch: hidden_states is not supported (use Prefill)");
    }
    total[i] = e.dim(0);
    if (!o.visual.empty() && static_cast<int64_t>(o.visual.size()) != total[i]) {
      return InvalidArgumentError("PrefillBatch: visual mask {} has {} entries for {} tokens", i,
                                  o.visual.size(), total[i]);
    }
    chunk[i] = o.chunk_tokens > 0 ? o.chunk_tokens : total[i];
    for (size_t j = 0; j < i; ++j) {
      if (seqs[j] == seqs[i]) return InvalidArgumentError("PrefillBatch: sequence {} repeats", i);
    }
  }
  std::vector<Tensor> logits(n);
  for (size_t i = 0; i < n; ++i) {
    FZ_ASSIGN_OR_RETURN(logits[i], Alloc({option(i).all_logits ? total[i] : 1, vocab}));
  }
  // Round r feeds chunk r of every sequence that has one, as one concatenated [T, H] batch.
  std::vector<PrefillPart> parts;
  std::vector<int64_t> part_c0;     // the part's first token within its sequence's input
  std::vector<size_t> part_seq;     // index into seqs
  std::vector<int64_t> logit_rows;  // rows of x whose logits are wanted, in order
  for (int64_t round = 0;; ++round) {
    parts.clear();
    part_c0.clear();
    part_seq.clear();
    int64_t rows = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t c0 = round * chunk[i];
      if (c0 >= total[i]) continue;
      const int64_t t = std::min(chunk[i], total[i] - c0);
      const PrefillOptions& o = option(i);
      const uint8_t* visual = o.visual.empty() ? nullptr : o.visual.data() + c0;
      parts.push_back(PrefillPart{seqs[i], rows, t, visual});
      part_c0.push_back(c0);
      part_seq.push_back(i);
      rows += t;
    }
    if (parts.empty()) break;
    FZ_ASSIGN_OR_RETURN(Tensor x, Alloc({rows, hid}));
    FZ_ASSIGN_OR_RETURN(Tensor positions, Alloc({rows}, DType::kI32));
    for (size_t p = 0; p < parts.size(); ++p) {
      const PrefillPart& part = parts[p];
      std::memcpy(x.data<float>() + part.row0 * hid,
                  embeds[part_seq[p]].data<float>() + part_c0[p] * hid,
                  static_cast<size_t>(part.rows * hid) * sizeof(float));
      for (int64_t r = 0; r < part.rows; ++r) {
        positions.data<int32_t>()[part.row0 + r] = static_cast<int32_t>(part.seq->length + r);
      }
    }
    for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
      FZ_RETURN_IF_ERROR(RunLayer(static_cast<int>(l), {}, parts, positions, x));
    }
    // lm_head only on the rows whose logits are returned, all in one pass.
    logit_rows.clear();
    for (size_t p = 0; p < parts.size(); ++p) {
      const PrefillPart& part = parts[p];
      part.seq->length += part.rows;
      if (option(part_seq[p]).all_logits) {
        for (int64_t r = 0; r < part.rows; ++r) logit_rows.push_back(part.row0 + r);
      } else if (part_c0[p] + part.rows == total[part_seq[p]]) {
        logit_rows.push_back(part.row0 + part.rows - 1);
      }
    }
    if (logit_rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(logit_rows.size());
    FZ_ASSIGN_OR_RETURN(Tensor picked, Alloc({m, hid}));
    for (int64_t r = 0; r < m; ++r) {
      std::memcpy(picked.data<float>() + r * hid, x.data<float>() + logit_rows[r] * hid,
                  static_cast<size_t>(hid) * sizeof(float));
    }
    FZ_ASSIGN_OR_RETURN(Tensor part_logits, Logits(picked));
    int64_t next = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      const size_t i = part_seq[p];
      int64_t count = 0, dest = 0;
      if (option(i).all_logits) {
        count = parts[p].rows;
        dest = part_c0[p];
      } else if (part_c0[p] + parts[p].rows == total[i]) {
        count = 1;
      }
      if (count == 0) continue;
      std::memcpy(logits[i].data<float>() + dest * vocab, part_logits.data<float>() + next * vocab,
                  static_cast<size_t>(count * vocab) * sizeof(float));
      next += count;
    }
  }
  return logits;
}

StatusOr<Tensor> Decoder::DecodeStep(std::span<Sequence* const> seqs,
                                     std::span<const int32_t> tokens) const {
  const int64_t b = static_cast<int64_t>(seqs.size());
  if (b == 0 || tokens.size() != seqs.size()) {
    return InvalidArgumentError("DecodeStep: {} sequences and {} tokens", seqs.size(),
                                tokens.size());
  }
  const int64_t hid = config_.hidden_size, nh = config_.num_attention_heads,
                g = config_.num_key_value_heads, d = config_.head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  FZ_ASSIGN_OR_RETURN(Tensor x, Embed(tokens));
  FZ_ASSIGN_OR_RETURN(Tensor positions, Alloc({b}, DType::kI32));
  for (int64_t i = 0; i < b; ++i)
    positions.data<int32_t>()[i] = static_cast<int32_t>(seqs[i]->length);
  const ops::RopeParams rope = RopeParamsOf(config_);
  FZ_ASSIGN_OR_RETURN(Tensor h, Alloc({b, hid}));
  FZ_ASSIGN_OR_RETURN(Tensor q, Alloc({b, nh, d}));
  FZ_ASSIGN_OR_RETURN(Tensor k, Alloc({b, g, d}));
  FZ_ASSIGN_OR_RETURN(Tensor v, Alloc({b, g, d}));
  FZ_ASSIGN_OR_RETURN(Tensor attn, Alloc({b, nh, d}));
  FZ_ASSIGN_OR_RETURN(Tensor q2, q.Reshape({b, nh * d}));
  FZ_ASSIGN_OR_RETURN(Tensor k2, k.Reshape({b, g * d}));
  FZ_ASSIGN_OR_RETURN(Tensor v2, v.Reshape({b, g * d}));
  FZ_ASSIGN_OR_RETURN(Tensor attn2, attn.Reshape({b, nh * d}));
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const auto& w = weights_.layers[l];
    FZ_RETURN_IF_ERROR(ops::RmsNorm(x, w.input_layernorm, eps, h));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.q_proj, w.q_bias, q2));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.k_proj, w.k_bias, k2));
    FZ_RETURN_IF_ERROR(ops::Linear(h, w.v_proj, w.v_bias, v2));
    FZ_RETURN_IF_ERROR(ops::ApplyRope(q, positions, rope));
    FZ_RETURN_IF_ERROR(ops::ApplyRope(k, positions, rope));
    FZ_RETURN_IF_ERROR(AttendDecodeRows(static_cast<int>(l), seqs, positions, q, k, v, attn));
    FZ_RETURN_IF_ERROR(ops::Linear(attn2, w.o_proj, w.o_bias, h));
    FZ_RETURN_IF_ERROR(AddInPlace(x, h));
    FZ_RETURN_IF_ERROR(ops::RmsNorm(x, w.post_attention_layernorm, eps, h));
    FZ_ASSIGN_OR_RETURN(Tensor mlp, Alloc({b, hid}));
    FZ_RETURN_IF_ERROR(Mlp(w, config_.intermediate_size, h, mlp));
    FZ_RETURN_IF_ERROR(AddInPlace(x, mlp));
  }
  for (Sequence* s : seqs) ++s->length;
  return Logits(x);
}

Status Decoder::AttendDecodeRows(int l, std::span<Sequence* const> seqs, const Tensor& positions,
                                 const Tensor& q, const Tensor& k, const Tensor& v,
                                 Tensor& attn) const {
  const int64_t b = static_cast<int64_t>(seqs.size()), nh = config_.num_attention_heads,
                g = config_.num_key_value_heads, d = config_.head_dim;
  const size_t row = static_cast<size_t>(g * d);
  std::vector<ops::KvSpan> spans;
  std::vector<int32_t> offsets(1, 0);
  for (int64_t i = 0; i < b; ++i) {
    Sequence& s = *seqs[i];
    const float* ki = k.data<float>() + i * row;
    const float* vi = v.data<float>() + i * row;
    const int32_t pos = positions.data<int32_t>()[i];
    const bool store = s.policy->OnDecodeWrite(l, pos);
    if (store) FZ_RETURN_IF_ERROR(s.kv.Append(l, ki, vi, &pos, 1));
    s.kv.AppendSpans(l, spans);
    if (!store) {
      // Attended to this step only: one extra f32 span straight from this step's k/v rows.
      ops::KvSpan unstored;
      unstored.k = ki;
      unstored.v = vi;
      unstored.num_tokens = 1;
      unstored.format = kv::KvFormat::kF32;
      spans.push_back(unstored);
    }
    offsets.push_back(static_cast<int32_t>(spans.size()));
  }
  FZ_RETURN_IF_ERROR(ops::PagedDecodeAttention(
      q, spans, offsets, ops::PagedDecodeParams{static_cast<int>(g), 0}, attn));
  // Decode residual window (METHODS.md §1.2 / KIVI's R): once a layer holds the policy's window
  // of full-precision tokens, they are classified and requantised into the class formats. This
  // step's attention above still read them at full precision.
  std::vector<float> window_k;
  std::vector<uint8_t> classes;
  for (int64_t i = 0; i < b; ++i) {
    Sequence& s = *seqs[i];
    const int window = s.policy->ResidualWindow();
    if (window <= 0 || s.kv.residual_tokens(l) < window) continue;
    const int64_t n = s.kv.full_tokens(l);
    window_k.resize(static_cast<size_t>(n) * row);
    s.kv.GatherFull(l, window_k.data(), nullptr);
    classes.clear();
    FZ_RETURN_IF_ERROR(
        s.policy->ClassifyResidual(l, q.data<float>() + i * nh * d, window_k.data(), n, classes));
    FZ_RETURN_IF_ERROR(s.kv.CompressResidual(l, classes));
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::llm
