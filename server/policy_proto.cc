#include "server/policy_proto.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

namespace framezip::server {
namespace {

namespace compress = engine::compress;

// A float field as the double a CLI user would have typed (0.9f -> 0.9, not 0.899999976...), so
// that the same option given over gRPC and on a command line is the same config.
double Widen(float x) {
  if (!std::isfinite(x)) return x;  // the range check refuses it, naming the field
  const std::string shortest = fmt::format("{}", x);
  return std::strtod(shortest.c_str(), nullptr);
}

// Out-of-range values pass through (saturated) for the range check to name them.
int Int(uint32_t v) { return static_cast<int>(std::min<uint32_t>(v, 1u << 30)); }

void ZipVlFrom(const v1::ZipVlOptions& p, compress::ZipVlOptions& z) {
  if (p.has_tau()) z.tau = Widen(p.tau());
  if (p.has_keep_recent()) z.keep_recent = p.keep_recent();
  if (p.has_probes_recent()) z.probes_recent = p.probes_recent();
  if (p.has_probes_random()) z.probes_random = p.probes_random();
  if (p.has_per_head()) z.per_head = p.per_head();
  switch (p.u_rows()) {
    case v1::U_ROWS_LOCAL:
      z.u_rows = compress::URows::kLocal;
      break;
    case v1::U_ROWS_SKIP:
      z.u_rows = compress::URows::kSkip;
      break;
    case v1::U_ROWS_ATTEND:
      z.u_rows = compress::URows::kAttendImportant;
      break;
    default:
      break;  // unspecified (or an unknown number, refused by the caller)
  }
  if (p.has_u_window()) z.u_window = p.u_window();
  if (p.has_u_sinks()) z.u_sinks = p.u_sinks();
  if (p.has_dense_layers()) z.dense_layers = p.dense_layers();
  if (p.has_high_bits()) z.high_bits = Int(p.high_bits());
  if (p.has_low_bits()) z.low_bits = Int(p.low_bits());
  if (p.has_window()) z.window = Int(p.window());
  if (p.has_seed()) z.seed = p.seed();
}

void AttentionPackFrom(const v1::AttentionPackOptions& p, compress::AttentionPackOptions& a) {
  if (p.has_rank_k()) a.rank_k = Int(p.rank_k());
  if (p.has_rank_v()) a.rank_v = Int(p.rank_v());
  if (p.has_groups()) a.groups = Int(p.groups());
  if (p.has_top_fraction()) a.top_fraction = Widen(p.top_fraction());
  if (p.has_ema()) a.ema = Widen(p.ema());
  if (p.has_regroup()) a.regroup = Int(p.regroup());
  if (p.has_dense_layers()) a.dense_layers = Int(p.dense_layers());
  if (p.has_min_tokens()) a.min_tokens = Int(p.min_tokens());
  if (p.has_seed()) a.seed = p.seed();
  if (p.factors() == v1::FACTORS_F16) a.factors = engine::kv::FactorFormat::kF16;
  if (p.factors() == v1::FACTORS_INT4) a.factors = engine::kv::FactorFormat::kInt4;
  if (p.has_recompress()) a.recompress = Int(p.recompress());
}

void DynamicLlavaFrom(const v1::DynamicLlavaOptions& p, compress::DynamicLlavaOptions& d) {
  if (p.has_sparse_layer()) d.sparse_layer = Int(p.sparse_layer());
  if (p.has_vision_keep()) d.vision_keep = Widen(p.vision_keep());
  if (p.select() == v1::SELECT_PREDICTOR) d.random_select = false;
  if (p.select() == v1::SELECT_RANDOM) d.random_select = true;
  if (p.has_seed()) d.seed = p.seed();
  if (p.has_text_gate()) d.text_gate = p.text_gate();
  if (p.has_text_keep()) d.text_keep = Widen(p.text_keep());
  if (p.has_text_threshold()) d.text_threshold = Widen(p.text_threshold());
  if (p.has_bits()) d.bits = Int(p.bits());
  if (p.has_window()) d.window = Int(p.window());
}

// Unknown enum numbers (proto3 enums are open) are refused by name.
Status CheckEnums(const v1::CompressionPolicy& p, std::string_view field) {
  if (!v1::URows_IsValid(p.zipvl().u_rows())) {
    return InvalidArgumentError("{}.zipvl.u_rows: unknown value {}", field,
                                static_cast<int>(p.zipvl().u_rows()));
  }
  if (!v1::Factors_IsValid(p.attentionpack().factors())) {
    return InvalidArgumentError("{}.attentionpack.factors: unknown value {}", field,
                                static_cast<int>(p.attentionpack().factors()));
  }
  if (!v1::Select_IsValid(p.dynamic_llava().select())) {
    return InvalidArgumentError("{}.dynamic_llava.select: unknown value {}", field,
                                static_cast<int>(p.dynamic_llava().select()));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<compress::PolicyConfig> PolicyFromProto(const v1::CompressionPolicy& p,
                                                 const compress::PolicyConfig& unspecified,
                                                 std::string_view field) {
  compress::PolicyConfig c;
  switch (p.kind()) {
    case v1::POLICY_KIND_UNSPECIFIED:
      return unspecified;
    case v1::POLICY_KIND_NONE:
      c.options = compress::NoneOptions{};
      break;
    case v1::POLICY_KIND_ZIPVL: {
      compress::ZipVlOptions z;
      ZipVlFrom(p.zipvl(), z);
      c.options = z;
      break;
    }
    case v1::POLICY_KIND_ATTENTIONPACK: {
      compress::AttentionPackOptions a;
      AttentionPackFrom(p.attentionpack(), a);
      c.options = a;
      break;
    }
    case v1::POLICY_KIND_ZIPVL_ATTENTIONPACK: {
      compress::ZipVlAttentionPackOptions both;
      ZipVlFrom(p.zipvl(), both.zipvl);
      AttentionPackFrom(p.attentionpack(), both.pack);
      // seed and dense_layers are read from zipvl: the pack's copies keep their defaults.
      both.pack.seed = compress::AttentionPackOptions{}.seed;
      both.pack.dense_layers = compress::AttentionPackOptions{}.dense_layers;
      c.options = both;
      break;
    }
    case v1::POLICY_KIND_DYNAMIC_LLAVA: {
      compress::DynamicLlavaOptions d;
      DynamicLlavaFrom(p.dynamic_llava(), d);
      c.options = d;
      break;
    }
    case v1::POLICY_KIND_FASTV: {
      compress::FastVOptions f;
      if (p.fastv().has_k()) f.k = Int(p.fastv().k());
      if (p.fastv().has_r()) f.r = Widen(p.fastv().r());
      c.options = f;
      break;
    }
    case v1::POLICY_KIND_KIVI: {
      compress::KiviOptions k;
      if (p.kivi().has_bits()) k.bits = Int(p.kivi().bits());
      if (p.kivi().has_window()) k.window = Int(p.kivi().window());
      c.options = k;
      break;
    }
    default:  // proto3 enums are open: unknown numbers arrive as they are
      return InvalidArgumentError("{}.kind: unknown policy {}", field, static_cast<int>(p.kind()));
  }
  FZ_RETURN_IF_ERROR(CheckEnums(p, field));
  // The options' own ranges name the proto field: "policy." + "zipvl.tau".
  FZ_RETURN_IF_ERROR(compress::ValidatePolicyConfig(c, fmt::format("{}.", field)));
  return c;
}

namespace {

void ZipVlTo(const compress::ZipVlOptions& z, v1::ZipVlOptions* p) {
  p->set_tau(static_cast<float>(z.tau));
  p->set_keep_recent(static_cast<uint32_t>(z.keep_recent));
  p->set_probes_recent(static_cast<uint32_t>(z.probes_recent));
  p->set_probes_random(static_cast<uint32_t>(z.probes_random));
  p->set_per_head(z.per_head);
  switch (z.u_rows) {
    case compress::URows::kLocal:
      p->set_u_rows(v1::U_ROWS_LOCAL);
      break;
    case compress::URows::kSkip:
      p->set_u_rows(v1::U_ROWS_SKIP);
      break;
    case compress::URows::kAttendImportant:
      p->set_u_rows(v1::U_ROWS_ATTEND);
      break;
  }
  p->set_u_window(static_cast<uint32_t>(z.u_window));
  p->set_u_sinks(static_cast<uint32_t>(z.u_sinks));
  p->set_dense_layers(static_cast<uint32_t>(z.dense_layers));
  p->set_high_bits(static_cast<uint32_t>(z.high_bits));
  p->set_low_bits(static_cast<uint32_t>(z.low_bits));
  p->set_window(static_cast<uint32_t>(z.window));
  p->set_seed(z.seed);
}

// `shared`: false for zipvl+attentionpack, whose seed and dense_layers are zipvl's.
void AttentionPackTo(const compress::AttentionPackOptions& a, v1::AttentionPackOptions* p,
                     bool shared) {
  p->set_rank_k(static_cast<uint32_t>(a.rank_k));
  p->set_rank_v(static_cast<uint32_t>(a.rank_v));
  p->set_groups(static_cast<uint32_t>(a.groups));
  p->set_top_fraction(static_cast<float>(a.top_fraction));
  p->set_ema(static_cast<float>(a.ema));
  p->set_regroup(static_cast<uint32_t>(a.regroup));
  if (shared) p->set_dense_layers(static_cast<uint32_t>(a.dense_layers));
  p->set_min_tokens(static_cast<uint32_t>(a.min_tokens));
  if (shared) p->set_seed(a.seed);
  p->set_factors(a.factors == engine::kv::FactorFormat::kInt4 ? v1::FACTORS_INT4 : v1::FACTORS_F16);
  p->set_recompress(static_cast<uint32_t>(a.recompress));
}

}  // namespace

void PolicyToProto(const compress::PolicyConfig& config, v1::CompressionPolicy* out) {
  out->Clear();
  if (std::holds_alternative<compress::NoneOptions>(config.options)) {
    out->set_kind(v1::POLICY_KIND_NONE);
  } else if (const auto* z = std::get_if<compress::ZipVlOptions>(&config.options)) {
    out->set_kind(v1::POLICY_KIND_ZIPVL);
    ZipVlTo(*z, out->mutable_zipvl());
  } else if (const auto* a = std::get_if<compress::AttentionPackOptions>(&config.options)) {
    out->set_kind(v1::POLICY_KIND_ATTENTIONPACK);
    AttentionPackTo(*a, out->mutable_attentionpack(), /*shared=*/true);
  } else if (const auto* both = std::get_if<compress::ZipVlAttentionPackOptions>(&config.options)) {
    out->set_kind(v1::POLICY_KIND_ZIPVL_ATTENTIONPACK);
    ZipVlTo(both->zipvl, out->mutable_zipvl());
    AttentionPackTo(both->pack, out->mutable_attentionpack(), /*shared=*/false);
  } else if (const auto* d = std::get_if<compress::DynamicLlavaOptions>(&config.options)) {
    out->set_kind(v1::POLICY_KIND_DYNAMIC_LLAVA);
    auto* p = out->mutable_dynamic_llava();
    if (d->sparse_layer) p->set_sparse_layer(static_cast<uint32_t>(*d->sparse_layer));
    if (d->vision_keep) p->set_vision_keep(static_cast<float>(*d->vision_keep));
    p->set_select(d->random_select ? v1::SELECT_RANDOM : v1::SELECT_PREDICTOR);
    p->set_seed(d->seed);
    p->set_text_gate(d->text_gate);
    p->set_text_keep(static_cast<float>(d->text_keep));
    if (d->text_threshold) p->set_text_threshold(static_cast<float>(*d->text_threshold));
    p->set_bits(static_cast<uint32_t>(d->bits));
    p->set_window(static_cast<uint32_t>(d->window));
  } else if (const auto* f = std::get_if<compress::FastVOptions>(&config.options)) {
    out->set_kind(v1::POLICY_KIND_FASTV);
    out->mutable_fastv()->set_k(static_cast<uint32_t>(f->k));
    out->mutable_fastv()->set_r(static_cast<float>(f->r));
  } else if (const auto* k = std::get_if<compress::KiviOptions>(&config.options)) {
    out->set_kind(v1::POLICY_KIND_KIVI);
    out->mutable_kivi()->set_bits(static_cast<uint32_t>(k->bits));
    out->mutable_kivi()->set_window(static_cast<uint32_t>(k->window));
  }
}

}  // namespace framezip::server
