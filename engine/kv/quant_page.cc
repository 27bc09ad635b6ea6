#include "engine/kv/quant_page.h"

#include <cstring>

#include "engine/ops/kv_quant.h"

namespace framezip::engine::kv {
namespace {

namespace kvq = ops::kvq;

// Byte offsets inside a quantised page.
struct Offsets {
  size_t code_rows;  // P × R
  size_t k_scale, k_zero, v_codes, v_scale, v_zero;
};

Offsets OffsetsOf(const PageLayout& l) {
  const int bits = KvFormatBits(l.format);
  const size_t c = static_cast<size_t>(l.channels()), p = static_cast<size_t>(l.page_tokens);
  const size_t v_params = p * (c / kvq::kQuantGroup) * sizeof(Float16);
  Offsets o;
  o.code_rows = p * kvq::CodeRowBytes(l.channels(), bits);
  o.k_scale = o.code_rows;
  o.k_zero = o.k_scale + c * sizeof(Float16);
  o.v_codes = o.k_zero + c * sizeof(Float16);
  o.v_scale = o.v_codes + o.code_rows;
  o.v_zero = o.v_scale + v_params;
  return o;
}

}  // namespace

size_t QuantPageKeyBytes(const PageLayout& l) { return OffsetsOf(l).v_codes; }

size_t QuantPageValueBytes(const PageLayout& l) {
  const Offsets o = OffsetsOf(l);
  return 2 * (o.v_zero - o.v_scale) + o.code_rows;
}

Status CheckQuantPageLayout(const PageLayout& l) {
  if (!IsQuantized(l.format)) {
    return InvalidArgumentError("{} is not a quantised KV format", KvFormatName(l.format));
  }
  if (l.head_dim % kvq::kQuantGroup != 0) {
    return InvalidArgumentError("{} KV pages need head_dim % {} == 0, got {}",
                                KvFormatName(l.format), kvq::kQuantGroup, l.head_dim);
  }
  if (l.page_tokens % 8 != 0) {
    return InvalidArgumentError("{} KV pages need page_tokens % 8 == 0, got {}",
                                KvFormatName(l.format), l.page_tokens);
  }
  return absl::OkStatus();
}

void WriteQuantPage(const PageLayout& l, const float* k, const float* v, int64_t n, void* page) {
  const int bits = KvFormatBits(l.format);
  const Offsets o = OffsetsOf(l);
  const int64_t c = l.channels();
  char* base = static_cast<char*>(page);
  std::memset(base, 0, l.PageBytes());
  kvq::QuantizeKeys(k, n, c, bits, reinterpret_cast<uint8_t*>(base),
                    reinterpret_cast<Float16*>(base + o.k_scale),
                    reinterpret_cast<Float16*>(base + o.k_zero));
  kvq::QuantizeValues(v, n, c, bits, reinterpret_cast<uint8_t*>(base + o.v_codes),
                      reinterpret_cast<Float16*>(base + o.v_scale),
                      reinterpret_cast<Float16*>(base + o.v_zero), l.page_tokens);
}

ops::KvSpan QuantPageSpan(const PageLayout& l, const void* page, int32_t n) {
  const Offsets o = OffsetsOf(l);
  const char* base = static_cast<const char*>(page);
  ops::KvSpan s;
  s.k = base;
  s.v = base + o.v_codes;
  s.num_tokens = n;
  s.format = l.format;
  s.k_scale = reinterpret_cast<const Float16*>(base + o.k_scale);
  s.k_zero = reinterpret_cast<const Float16*>(base + o.k_zero);
  s.v_scale = reinterpret_cast<const Float16*>(base + o.v_scale);
  s.v_zero = reinterpret_cast<const Float16*>(base + o.v_zero);
  s.v_param_stride = l.page_tokens;
  return s;
}

}  // namespace framezip::engine::kv
