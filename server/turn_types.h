// Plain C++ types the server's core works with. Requests are validated at the gRPC edge
// (server/request_validation.h) into these structs; nothing below the edge sees protobuf, so the
// scheduler, the session store and the model backend stay independent of gRPC.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/compress/policy_config.h"

namespace framezip::server {

using Clock = std::chrono::steady_clock;

// A session's compression policy and its options: the engine's one typed form (the gRPC edge
// fills it from the request's CompressionPolicy, server/policy_proto.h), carried as it is to
// Engine::NewConversation.
using engine::compress::PolicyConfig;

// The compression method of a session (framezip.v1.PolicyKind without UNSPECIFIED: validation
// resolves that to the server's default).
enum class PolicyKind { kNone, kZipVl, kAttentionPack, kDynamicLlava, kFastV, kKivi, kZipVlAttentionPack };

// Name as used in config files and logs: "none", "zipvl", ...
const char* PolicyName(PolicyKind kind);
// The inverse of PolicyName; false for an unknown name.
bool PolicyFromName(const std::string& name, PolicyKind* kind);
// The method of a policy (kivi4 is kKivi).
PolicyKind KindOf(const PolicyConfig& policy);

struct SamplingSpec {
  float temperature = 0;  // 0 = greedy
  uint32_t top_k = 0;     // 0 = off
  float top_p = 1;        // (0, 1]
  float repetition_penalty = 1;
  uint32_t max_tokens = 0;  // 0 = server default
  std::vector<std::string> stop;
  std::vector<uint32_t> stop_token_ids;
  uint64_t seed = 0;  // 0 = pick one
  bool ignore_eos = false;  // benchmarks: do not stop at the model's end-of-turn tokens
};

struct FrameSpec {
  uint32_t num_frames = 0;  // exactly this many (when > 0)
  float fps = 0;            // or this rate (when > 0), capped by max_frames
  uint32_t max_frames = 0;
  double start_seconds = 0;
  double end_seconds = 0;  // 0 = the end
};

enum class Role { kSystem, kUser, kAssistant };
const char* RoleName(Role role);

// One part of a message: text, or a media item placed at this point.
struct ContentPart {
  std::string text;
  std::string media_id;  // non-empty = a media part
};

struct ChatMessage {
  Role role = Role::kUser;
  std::vector<ContentPart> content;
};

enum class MediaKind { kVideo, kImage };

// What the server knows of a media item after its upload was checked.
struct MediaInfo {
  std::string media_id;
  std::string name;
  MediaKind kind = MediaKind::kVideo;
  std::string mime_type;
  uint64_t size_bytes = 0;
  std::string content_hash;  // hex SHA-256 of the bytes
  double duration_seconds = 0;
  double fps = 0;
  uint32_t width = 0;
  uint32_t height = 0;
  std::string codec;
  std::string container;
  std::vector<double> frame_timestamps;
  uint32_t visual_tokens = 0;
  FrameSpec frames;
  // Where the bytes are kept for the engine (a file in the server's media directory). Never shown
  // to clients.
  std::string path;
};

enum class FinishReason { kStop, kLength, kCancelled };

enum class KvTier { kDevice, kHost, kDisk, kRedis, kRemote };
enum class KvPrecision { kF32, kF16, kBF16, kInt8, kInt4, kInt2, kLowRank };
const char* KvTierName(KvTier tier);
const char* KvPrecisionName(KvPrecision precision);

struct KvBytes {
  KvTier tier = KvTier::kDevice;
  KvPrecision precision = KvPrecision::kF32;
  uint64_t bytes = 0;
};

// Usage and timing of one turn (framezip.v1.TurnStats). Times are seconds from the request's
// arrival at the server unless named otherwise.
struct TurnStats {
  std::string turn_id;
  FinishReason finish_reason = FinishReason::kStop;
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  uint32_t prefilled_tokens = 0;
  uint32_t visual_tokens_before_pruning = 0;
  uint32_t visual_tokens_after_pruning = 0;
  uint32_t generated_tokens = 0;
  double queue_seconds = 0;
  double time_to_first_token_seconds = 0;
  double media_decode_seconds = 0;
  double vision_encode_seconds = 0;
  double prefill_seconds = 0;
  double kv_restore_seconds = 0;
  // Where the cached prefix came from: engine memory, or the KV store tier it was restored from
  // (framezip_kv_restore_seconds{tier}); not sent to clients.
  KvTier kv_restore_tier = KvTier::kDevice;
  double decode_tokens_per_second = 0;
  double e2e_seconds = 0;
  std::vector<KvBytes> kv_bytes;  // held by the session after the turn
  // f16 bytes of every position the session's cache covers over the bytes it holds for them.
  // An engine backend reports its cache's own figure (ReportStats), which counts what the
  // policy removed (Dynamic-LLaVA's rows) or factored (AttentionPack); otherwise the scheduler
  // estimates it from the tiers' precisions.
  double compression_ratio = 1;
  bool compression_ratio_reported = false;
  std::vector<float> layer_kept_ratio;
  double selection_overhead_ms = 0;
  std::vector<uint32_t> layer_visual_tokens;  // visual rows that ran through each layer
  double prefill_flops_saved_ratio = 0;        // linear-layer prefill work removed by pruning
  uint32_t text_tokens_gated = 0;              // generated tokens whose K/V was not stored
  PolicyConfig policy;
  uint64_t seed = 0;
  // Inter-token gaps of this turn (seconds), for the ITL histogram; not sent to clients.
  std::vector<double> inter_token_seconds;
};

// The client's session id inside a session key ("<session_id>.<secret>"), for logs and messages:
// a key's secret never leaves the server's memory.
inline std::string SessionIdOfKey(const std::string& key) { return key.substr(0, key.find('.')); }

// One turn as the engine sees it: the whole conversation to answer (earlier turns, then the new
// user message last), the session's media, and the options in force.
struct TurnRequest {
  std::string turn_id;
  // Empty for Generate (stateless): nothing is kept after the turn. `session_id` is the client's
  // name of the session (logs); `session_key` names this incarnation of it (SessionRecord::key)
  // and is what the engine keys the session's KV by, so a session re-created under the same id
  // never sees the old one's KV.
  std::string session_id;
  std::string session_key;
  // The principal the turn acts for (per-principal admission caps).
  std::string principal;
  std::string model;
  std::vector<ChatMessage> messages;
  std::vector<MediaInfo> media;  // every media item a message refers to
  SamplingSpec sampling;
  PolicyConfig policy;
  Clock::time_point arrival = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();
  // Set by the caller (e.g. the gRPC reactor's OnCancel) to cancel the turn; the engine checks
  // it before every step. Optional. Unlike TurnEngine::Cancel it works even before the engine
  // has registered the turn.
  std::shared_ptr<const std::atomic<bool>> cancel_flag;
};

struct VisionDescription {
  uint32_t image_size = 0;
  uint32_t patch_size = 0;
  std::vector<float> image_mean;
  std::vector<float> image_std;
  uint32_t tokens_per_video_frame = 0;
  uint32_t tokens_per_video = 0;  // per video besides its frames (LLaVA-OneVision's newline)
  uint32_t tokens_per_image = 0;
  // Tokens of an image of (height, width) original pixels that is the only one of its turn, which
  // LLaVA-OneVision cuts into anyres tiles (server/preprocess_spec.h); unset: tokens_per_image.
  std::function<uint32_t(uint32_t height, uint32_t width)> sole_image_tokens = nullptr;
  uint32_t default_num_frames = 0;
};

// What GetModelInfo reports.
struct ModelDescription {
  std::string name;
  std::string architecture;
  std::string text_architecture;
  std::string vision_architecture;
  uint32_t context_tokens = 0;
  uint32_t vocab_size = 0;
  std::string weight_dtype;
  std::string weight_format;     // "bf16", "int8" or "fp8" (engine/runtime/weight_format.h)
  uint64_t weight_bytes = 0;     // the loaded weights, where they are served
  uint64_t kv_budget_bytes = 0;  // the KV pool's budget
  std::string device;
  std::vector<PolicyKind> policies;
  VisionDescription vision;
};

}  // namespace framezip::server
