#include "server/proto_convert.h"

#include "server/policy_proto.h"

namespace framezip::server {

v1::PolicyKind ToProto(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kNone:
      return v1::POLICY_KIND_NONE;
    case PolicyKind::kZipVl:
      return v1::POLICY_KIND_ZIPVL;
    case PolicyKind::kAttentionPack:
      return v1::POLICY_KIND_ATTENTIONPACK;
    case PolicyKind::kDynamicLlava:
      return v1::POLICY_KIND_DYNAMIC_LLAVA;
    case PolicyKind::kFastV:
      return v1::POLICY_KIND_FASTV;
    case PolicyKind::kKivi:
      return v1::POLICY_KIND_KIVI;
    case PolicyKind::kZipVlAttentionPack:
      return v1::POLICY_KIND_ZIPVL_ATTENTIONPACK;
  }
  return v1::POLICY_KIND_UNSPECIFIED;
}

void ToProto(const PolicyConfig& policy, v1::CompressionPolicy* out) {
  PolicyToProto(policy, out);
}

void ToProto(const SamplingSpec& s, v1::SamplingParams* out) {
  out->set_temperature(s.temperature);
  out->set_top_k(s.top_k);
  out->set_top_p(s.top_p);
  out->set_repetition_penalty(s.repetition_penalty);
  out->set_max_tokens(s.max_tokens);
  for (const auto& stop : s.stop) out->add_stop(stop);
  for (uint32_t id : s.stop_token_ids) out->add_stop_token_ids(id);
  out->set_seed(s.seed);
  out->set_ignore_eos(s.ignore_eos);
}

void ToProto(const FrameSpec& s, v1::FrameSampling* out) {
  if (s.num_frames > 0) {
    out->set_num_frames(s.num_frames);
  } else if (s.fps > 0) {
    out->set_fps(s.fps);
  }
  out->set_max_frames(s.max_frames);
  out->set_start_seconds(s.start_seconds);
  out->set_end_seconds(s.end_seconds);
}

void ToProto(const ChatMessage& m, v1::Message* out) {
  switch (m.role) {
    case Role::kSystem:
      out->set_role(v1::ROLE_SYSTEM);
      break;
    case Role::kUser:
      out->set_role(v1::ROLE_USER);
      break;
    case Role::kAssistant:
      out->set_role(v1::ROLE_ASSISTANT);
      break;
  }
  for (const ContentPart& p : m.content) {
    auto* part = out->add_content();
    if (p.media_id.empty()) {
      part->set_text(p.text);
    } else {
      part->set_media_id(p.media_id);
    }
  }
}

void ToProto(const MediaInfo& m, v1::Media* out) {
  out->set_media_id(m.media_id);
  out->set_name(m.name);
  out->set_kind(m.kind == MediaKind::kImage ? v1::MEDIA_KIND_IMAGE : v1::MEDIA_KIND_VIDEO);
  out->set_mime_type(m.mime_type);
  out->set_size_bytes(m.size_bytes);
  out->set_content_hash(m.content_hash);
  out->set_duration_seconds(m.duration_seconds);
  out->set_fps(m.fps);
  out->set_width(m.width);
  out->set_height(m.height);
  out->set_codec(m.codec);
  out->set_container(m.container);
  for (double t : m.frame_timestamps) out->add_frame_timestamps(t);
  out->set_visual_tokens(m.visual_tokens);
}

void ToProto(const KvBytes& kv, v1::KvBytes* out) {
  switch (kv.tier) {
    case KvTier::kDevice:
      out->set_tier(v1::KV_TIER_DEVICE);
      break;
    case KvTier::kHost:
      out->set_tier(v1::KV_TIER_HOST);
      break;
    case KvTier::kDisk:
      out->set_tier(v1::KV_TIER_DISK);
      break;
    case KvTier::kRedis:
      out->set_tier(v1::KV_TIER_REDIS);
      break;
    case KvTier::kRemote:
      out->set_tier(v1::KV_TIER_REMOTE);
      break;
  }
  switch (kv.precision) {
    case KvPrecision::kF32:
      out->set_precision(v1::KV_PRECISION_F32);
      break;
    case KvPrecision::kF16:
      out->set_precision(v1::KV_PRECISION_F16);
      break;
    case KvPrecision::kBF16:
      out->set_precision(v1::KV_PRECISION_BF16);
      break;
    case KvPrecision::kInt8:
      out->set_precision(v1::KV_PRECISION_INT8);
      break;
    case KvPrecision::kInt4:
      out->set_precision(v1::KV_PRECISION_INT4);
      break;
    case KvPrecision::kInt2:
      out->set_precision(v1::KV_PRECISION_INT2);
      break;
    case KvPrecision::kLowRank:
      out->set_precision(v1::KV_PRECISION_LOW_RANK);
      break;
  }
  out->set_bytes(kv.bytes);
}

void ToProto(const TurnStats& s, v1::TurnStats* out) {
  out->set_turn_id(s.turn_id);
  switch (s.finish_reason) {
    case FinishReason::kStop:
      out->set_finish_reason(v1::FINISH_REASON_STOP);
      break;
    case FinishReason::kLength:
      out->set_finish_reason(v1::FINISH_REASON_LENGTH);
      break;
    case FinishReason::kCancelled:
      out->set_finish_reason(v1::FINISH_REASON_CANCELLED);
      break;
  }
  out->set_prompt_tokens(s.prompt_tokens);
  out->set_cached_tokens(s.cached_tokens);
  out->set_prefilled_tokens(s.prefilled_tokens);
  out->set_visual_tokens_before_pruning(s.visual_tokens_before_pruning);
  out->set_visual_tokens_after_pruning(s.visual_tokens_after_pruning);
  out->set_generated_tokens(s.generated_tokens);
  out->set_queue_seconds(s.queue_seconds);
  out->set_time_to_first_token_seconds(s.time_to_first_token_seconds);
  out->set_media_decode_seconds(s.media_decode_seconds);
  out->set_vision_encode_seconds(s.vision_encode_seconds);
  out->set_prefill_seconds(s.prefill_seconds);
  out->set_kv_restore_seconds(s.kv_restore_seconds);
  out->set_decode_tokens_per_second(s.decode_tokens_per_second);
  out->set_e2e_seconds(s.e2e_seconds);
  for (const KvBytes& kv : s.kv_bytes) ToProto(kv, out->add_kv_bytes());
  out->set_compression_ratio(s.compression_ratio);
  for (float r : s.layer_kept_ratio) out->add_layer_kept_ratio(r);
  out->set_selection_overhead_ms(s.selection_overhead_ms);
  for (uint32_t v : s.layer_visual_tokens) out->add_layer_visual_tokens(v);
  out->set_prefill_flops_saved_ratio(s.prefill_flops_saved_ratio);
  out->set_text_tokens_gated(s.text_tokens_gated);
  ToProto(s.policy, out->mutable_policy());
  out->set_seed(s.seed);
}

void ToProto(const ModelDescription& m, const PolicyConfig& default_policy,
             uint64_t max_upload_bytes, v1::ModelInfo* out) {
  out->set_model(m.name);
  out->set_architecture(m.architecture);
  out->set_text_architecture(m.text_architecture);
  out->set_vision_architecture(m.vision_architecture);
  out->set_context_tokens(m.context_tokens);
  out->set_vocab_size(m.vocab_size);
  out->set_weight_dtype(m.weight_dtype);
  out->set_weight_format(m.weight_format);
  out->set_weight_bytes(m.weight_bytes);
  out->set_kv_budget_bytes(m.kv_budget_bytes);
  out->set_device(m.device);
  for (PolicyKind p : m.policies) out->add_policies(ToProto(p));
  ToProto(default_policy, out->mutable_default_policy());
  auto* v = out->mutable_vision();
  v->set_image_size(m.vision.image_size);
  v->set_patch_size(m.vision.patch_size);
  for (float x : m.vision.image_mean) v->add_image_mean(x);
  for (float x : m.vision.image_std) v->add_image_std(x);
  v->set_tokens_per_video_frame(m.vision.tokens_per_video_frame);
  v->set_tokens_per_image(m.vision.tokens_per_image);
  v->set_default_num_frames(m.vision.default_num_frames);
  out->set_max_upload_bytes(max_upload_bytes);
  out->add_served_models(m.name);
}

void ToProto(const SessionRecord& r, const std::vector<KvBytes>& kv, uint32_t cached_tokens,
             v1::Session* out) {
  out->set_session_id(r.spec.session_id);
  out->set_model(r.spec.model);
  ToProto(r.spec.policy, out->mutable_policy());
  ToProto(r.spec.sampling, out->mutable_sampling());
  ToProto(r.spec.frames, out->mutable_frames());
  out->set_ttl_seconds(r.spec.ttl_seconds);
  out->set_created_unix_ms(r.created_unix_ms);
  out->set_last_used_unix_ms(r.last_used_unix_ms);
  out->set_expires_unix_ms(r.expires_unix_ms);
  for (const MediaInfo& m : r.media) ToProto(m, out->add_media());
  for (const ChatMessage& m : r.messages) ToProto(m, out->add_messages());
  out->set_turns(r.turns);
  out->set_cached_tokens(cached_tokens);
  for (const KvBytes& k : kv) ToProto(k, out->add_kv_bytes());
  out->set_turn_running(!r.running_turn_id.empty());
  for (const auto& [k, v] : r.spec.labels) (*out->mutable_labels())[k] = v;
}

}  // namespace framezip::server
