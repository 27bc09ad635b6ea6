// Engine::ExportConversation / RestoreConversation: a Conversation's KV pages and the state the
// runtime needs to continue it (position, token history, the pending last token), through the page
// codec (engine/kv/page_codec.h). Kept apart from engine.cc, which runs turns.
//
// Only the KV pages and the runtime's own fields are carried: a compression policy's internal
// per-sequence state (accumulated scores) starts fresh after a restore, which is exact for "none"
// and for policies that decide from the chunk they see.
#include <algorithm>

#include "engine/runtime/engine.h"

namespace framezip::engine::runtime {

StatusOr<ConversationSegment> Engine::ExportConversation(const Conversation& c,
                                                         const kv::SegmentMark& since,
                                                         size_t max_block_bytes) const {
  if (c.decoding_ || c.start_ != nullptr || c.broken_) {
    return FailedPreconditionError(
        "cannot export a conversation while it runs a turn (or after one broke off mid-prompt)");
  }
  if (since.history_tokens < 0 || static_cast<size_t>(since.history_tokens) > c.history_.size()) {
    return InvalidArgumentError("export: mark at token {} of a {}-token history",
                                since.history_tokens, c.history_.size());
  }
  kv::SegmentState state;
  state.sequence_length = c.sequence_->length;
  state.tokens.assign(c.history_.begin() + since.history_tokens, c.history_.end());
  state.pending = c.pending_;
  state.ended_on_stop = c.current_.stats.stop_reason == llm::StopReason::kStopToken;
  state.policy = c.policy_;
  ConversationSegment out;
  FZ_ASSIGN_OR_RETURN(out.encoded,
                      kv::EncodeSegment(c.sequence_->kv, since, state, max_block_bytes));
  out.tokens = std::move(state.tokens);
  return out;
}

StatusOr<RestoredConversation> Engine::RestoreConversation(
    std::span<const kv::DecodedSegment> segments) {
  if (segments.empty()) return InvalidArgumentError("restore: no segments");
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<Conversation> c,
                      NewConversation(segments.back().state.policy));
  FZ_ASSIGN_OR_RETURN(kv::RestoredState restored, kv::RestoreSegments(segments, c->sequence_->kv));
  // A low-rank block carries the RoPE its keys are rotated by when read; the codec checks only
  // its head size, so a block from another model (or a damaged store) would attend with wrong
  // angles instead of failing.
  const ops::RopeParams& model_rope = decoder_->shape().rope;
  for (int l = 0; l < c->sequence_->kv.num_layers(); ++l) {
    for (const kv::LowRankBlock& b : c->sequence_->kv.low_rank_blocks(l)) {
      if (!(b.rope == model_rope)) {
        return DataLossError(
            "restore: a low-rank block of layer {} has RoPE theta {} (llama3 "
            "factor {}), the model's is theta {} (factor {})",
            l, b.rope.theta, b.rope.llama3_factor, model_rope.theta, model_rope.llama3_factor);
      }
    }
  }
  kv::SegmentState& st = restored.state;
  // Every token fed occupies one position (the history also holds sampled, unfed ones).
  if (st.sequence_length < 0 || st.tokens.size() < static_cast<size_t>(st.sequence_length)) {
    return InvalidArgumentError("restore: {} history tokens for a sequence of length {}",
                                st.tokens.size(), st.sequence_length);
  }
  c->sequence_->length = st.sequence_length;
  c->history_ = std::move(st.tokens);
  c->pending_ = std::move(st.pending);
  c->first_turn_ = c->history_.empty();
  c->current_ = TurnResult();
  c->current_.stats.policy = c->policy_;
  c->current_.stats.stop_reason =
      st.ended_on_stop ? llm::StopReason::kStopToken : llm::StopReason::kMaxTokens;
  c->current_.stats.kv_bytes = c->sequence_->kv.bytes();
  return RestoredConversation{std::move(c), std::move(restored.mark)};
}

}  // namespace framezip::engine::runtime
