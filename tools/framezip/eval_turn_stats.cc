#include "tools/framezip/eval_turn_stats.h"

#include <string>

namespace framezip::cli {

void FillTurnStats(const engine::runtime::TurnStats& st, eval::ItemResult& r) {
  r.prompt_tokens = st.prompt_tokens;
  r.visual_tokens = st.visual_tokens;
  r.generated_tokens = st.generated_tokens;
  r.text_tokens_gated = st.text_tokens_gated;
  r.cached_tokens = st.cached_tokens;
  r.vision_ms = st.vision_ms;
  r.prefill_ms = st.prefill_ms;
  r.decode_ms = st.decode_ms;
  r.kept_ratio.assign(st.layer_kept_ratio.begin(), st.layer_kept_ratio.end());
  r.kv_bytes = static_cast<int64_t>(st.kv_bytes);
  r.kv_bytes_by_format.clear();
  for (size_t f = 0; f < st.kv_bytes_by_format.size(); ++f) {
    if (st.kv_bytes_by_format[f] == 0) continue;
    r.kv_bytes_by_format[std::string(engine::kv::KvFormatName(
        static_cast<engine::kv::KvFormat>(f)))] = static_cast<int64_t>(st.kv_bytes_by_format[f]);
  }
  r.compression_ratio = st.compression_ratio;
  r.selection_ms = st.selection_overhead_ms;
}

}  // namespace framezip::cli
