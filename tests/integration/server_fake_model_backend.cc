#include "tests/integration/server_fake_model_backend.h"

#include <algorithm>
#include <thread>

#include "engine/llm/sampler.h"
#include "fmt/format.h"

namespace framezip::testing {
namespace {

constexpr uint32_t kRoleBase = 256;  // + Role
constexpr uint32_t kEndOfTurn = 260;
constexpr uint32_t kVisualBase = 512;  // + (hash byte ^ index) & 0xff

uint32_t RoleToken(server::Role role) { return kRoleBase + static_cast<uint32_t>(role); }

uint64_t Fnv1a(const std::vector<uint32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t t : tokens) {
    for (int i = 0; i < 4; ++i) {
      h ^= (t >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

}  // namespace

class FakeModelBackend::Sequence final : public server::BackendSequence {
 public:
  Sequence(FakeModelBackend* owner, std::vector<uint32_t> prompt, uint32_t cached,
           std::string answer, const engine::llm::SamplingParams& stop)
      : owner_(owner),
        tokens_(std::move(prompt)),
        prompt_size_(tokens_.size()),
        consumed_(cached),
        answer_(std::move(answer)),
        stop_(stop) {
    owner_->live_sequences_.fetch_add(1);
  }
  ~Sequence() override {
    owner_->used_bytes_.fetch_sub(allocated_);
    owner_->live_sequences_.fetch_sub(1);
  }
  uint64_t allocated_bytes() const override { return allocated_; }

  void Allocate(uint64_t tokens) {
    const uint64_t bytes = tokens * owner_->options_.bytes_per_token;
    allocated_ += bytes;
    owner_->used_bytes_.fetch_add(bytes);
  }

  FakeModelBackend* owner_;
  std::vector<uint32_t> tokens_;  // prompt, then generated tokens
  size_t prompt_size_;
  size_t consumed_;  // prompt tokens whose KV exists (restored or prefilled)
  std::string answer_;
  size_t answered_ = 0;  // answer bytes generated
  uint64_t allocated_ = 0;
  // The engine's stop rule over the generated text, applied as Engine::Accept applies it.
  engine::llm::StopCondition stop_;
  std::string text_;   // generated text (not a stop token's)
  size_t shown_ = 0;   // bytes of text_ handed to the scheduler
  int generated_ = 0;  // tokens generated
};

FakeModelBackend::FakeModelBackend(FakeModelOptions options) : options_(options) {
  model_.name = "fake-test-model";
  model_.architecture = "fake";
  model_.text_architecture = "fake";
  model_.vision_architecture = "fake";
  model_.context_tokens = options_.context_tokens;
  model_.vocab_size = 1024;
  model_.weight_dtype = "f32";
  model_.weight_format = "bf16";
  model_.device = "cpu";
  model_.policies = {server::PolicyKind::kNone, server::PolicyKind::kZipVl};
  model_.vision = {384, 14, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}, 8, 8, 4};
}

std::string FakeModelBackend::AnswerFor(const std::vector<uint32_t>& prompt,
                                        const std::string& last_user) {
  return fmt::format("You said '{}' (context {:08x}).", last_user,
                     static_cast<uint32_t>(Fnv1a(prompt)));
}

std::vector<uint32_t> FakeModelBackend::Render(const server::TurnRequest& request,
                                               std::string* last_user) const {
  std::vector<uint32_t> tokens;
  for (const server::ChatMessage& message : request.messages) {
    tokens.push_back(RoleToken(message.role));
    std::string text;
    for (const server::ContentPart& part : message.content) {
      if (part.media_id.empty()) {
        text += part.text;
        tokens.insert(tokens.end(), part.text.begin(), part.text.end());
        for (size_t i = tokens.size() - part.text.size(); i < tokens.size(); ++i) {
          tokens[i] &= 0xff;  // chars are signed; token ids are the byte values
        }
        continue;
      }
      for (const server::MediaInfo& media : request.media) {
        if (media.media_id != part.media_id) continue;
        const uint32_t n = media.visual_tokens > 0 ? media.visual_tokens : 8;
        for (uint32_t i = 0; i < n; ++i) {
          const char c = media.content_hash.empty()
                             ? 0
                             : media.content_hash[i % media.content_hash.size()];
          tokens.push_back(kVisualBase + ((static_cast<uint32_t>(c) ^ i) & 0xff));
        }
      }
    }
    tokens.push_back(kEndOfTurn);
    if (message.role == server::Role::kUser) *last_user = text;
  }
  tokens.push_back(RoleToken(server::Role::kAssistant));
  return tokens;
}

StatusOr<server::PreparedTurn> FakeModelBackend::Prepare(const server::TurnRequest& request,
                                                         server::KvReservations& /*kv*/) {
  std::string last_user;
  std::vector<uint32_t> prompt = Render(request, &last_user);
  if (prompt.size() >= options_.context_tokens) {
    return InvalidArgumentError("the prompt is {} tokens; the model's context is {}",
                                prompt.size(), options_.context_tokens);
  }
  uint32_t cached = 0;
  if (!request.session_key.empty()) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(request.session_key);
    if (it != sessions_.end()) {
      const auto& kept = it->second;
      const size_t n = std::min(kept.size(), prompt.size() - 1);
      while (cached < n && kept[cached] == prompt[cached]) ++cached;
    }
  }
  const uint32_t room = options_.context_tokens - static_cast<uint32_t>(prompt.size());
  const uint32_t max_new = std::min(
      request.sampling.max_tokens > 0 ? request.sampling.max_tokens : options_.default_max_tokens,
      room);
  server::PreparedTurn turn;
  turn.prompt_tokens = static_cast<uint32_t>(prompt.size());
  turn.cached_tokens = cached;
  for (const server::MediaInfo& media : request.media) {
    turn.visual_tokens_before_pruning += media.visual_tokens > 0 ? media.visual_tokens : 8;
  }
  turn.visual_tokens_after_pruning = turn.visual_tokens_before_pruning;
  turn.predicted_kv_bytes =
      (static_cast<uint64_t>(turn.prompt_tokens - cached) + max_new) * options_.bytes_per_token;
  turn.max_new_tokens = max_new;
  turn.seed = request.sampling.seed;
  std::string answer = AnswerFor(prompt, last_user);
  engine::llm::SamplingParams stop;
  stop.max_new_tokens = static_cast<int>(std::max<uint32_t>(max_new, 1));
  stop.stop_strings = request.sampling.stop;
  for (uint32_t id : request.sampling.stop_token_ids) {
    stop.stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  // The fake has nothing to say after its answer: it ends the turn there even with ignore_eos.
  stop.stop_token_ids.push_back(kEndOfTurn);
  turn.sequence =
      std::make_unique<Sequence>(this, std::move(prompt), cached, std::move(answer), stop);
  return turn;
}

Status FakeModelBackend::Step(std::span<server::StepItem> batch) {
  if (options_.step_delay.count() > 0) std::this_thread::sleep_for(options_.step_delay);
  uint64_t seen = largest_batch_.load();
  while (batch.size() > seen && !largest_batch_.compare_exchange_weak(seen, batch.size())) {
  }
  for (server::StepItem& item : batch) {
    auto& seq = static_cast<Sequence&>(*item.sequence);
    if (item.prefill_tokens > 0) {
      const size_t n = std::min<size_t>(item.prefill_tokens, seq.prompt_size_ - seq.consumed_);
      seq.consumed_ += n;
      seq.Allocate(n);
      if (seq.consumed_ < seq.prompt_size_) continue;  // more prefill to come: no token yet
    }
    item.emitted = true;
    seq.Allocate(1);
    // One byte of the answer per token, then the end-of-turn token.
    std::string piece;
    if (seq.answered_ < seq.answer_.size()) {
      piece = std::string(1, seq.answer_[seq.answered_++]);
      item.token_id = static_cast<unsigned char>(piece[0]);
    } else {
      item.token_id = kEndOfTurn;
    }
    seq.tokens_.push_back(item.token_id);
    ++seq.generated_;
    // The backend decides, as the engine does: a stop token shows nothing; otherwise the text up
    // to a stop string, holding back what could still become one.
    using engine::llm::StopReason;
    const auto token = static_cast<int32_t>(item.token_id);
    size_t text_end = std::string::npos;
    StopReason reason = seq.stop_.Check(token, seq.generated_, seq.text_, &text_end);
    if (reason != StopReason::kStopToken) {
      seq.text_ += piece;
      reason = seq.stop_.Check(token, seq.generated_, seq.text_, &text_end);
    }
    size_t visible = seq.text_.size();
    if (reason == StopReason::kStopString) {
      visible = text_end;
    } else if (reason == StopReason::kNone) {
      visible -= seq.stop_.HeldBackBytes(seq.text_);
    }
    if (visible > seq.shown_) {
      item.text = seq.text_.substr(seq.shown_, visible - seq.shown_);
      seq.shown_ = visible;
    }
    item.withheld_bytes = static_cast<uint32_t>(seq.text_.size() - std::max(visible, seq.shown_));
    switch (reason) {
      case StopReason::kNone:
      case StopReason::kCancelled:
        break;
      case StopReason::kStopToken:
        item.stop = server::StopCause::kStopToken;
        break;
      case StopReason::kStopString:
        item.stop = server::StopCause::kStopString;
        break;
      case StopReason::kMaxTokens:
        item.stop = server::StopCause::kLength;
        break;
    }
  }
  return absl::OkStatus();
}

Status FakeModelBackend::Commit(const std::string& session_id, server::BackendSequence& sequence) {
  auto& seq = static_cast<Sequence&>(sequence);
  std::lock_guard lock(mu_);
  auto& kept = sessions_[session_id];
  // The session's KV becomes the sequence's tokens: release the old accounting and the
  // sequence's allocation, then count the whole sequence as the session's.
  used_bytes_.fetch_sub(kept.size() * options_.bytes_per_token);
  used_bytes_.fetch_sub(seq.allocated_);
  seq.allocated_ = 0;
  kept = seq.tokens_;
  used_bytes_.fetch_add(kept.size() * options_.bytes_per_token);
  return absl::OkStatus();
}

std::vector<server::KvBytes> FakeModelBackend::ReleaseSession(const std::string& session_id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return {};
  const uint64_t bytes = it->second.size() * options_.bytes_per_token;
  used_bytes_.fetch_sub(bytes);
  sessions_.erase(it);
  return {{server::KvTier::kDevice, server::KvPrecision::kF16, bytes}};
}

std::vector<server::KvBytes> FakeModelBackend::SessionKv(const std::string& session_id) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return {};
  return {{server::KvTier::kDevice, server::KvPrecision::kF16,
           it->second.size() * options_.bytes_per_token}};
}

uint32_t FakeModelBackend::SessionCachedTokens(const std::string& session_id) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  return it == sessions_.end() ? 0 : static_cast<uint32_t>(it->second.size());
}

Status FakeModelBackend::FlushSessions() {
  flushes_.fetch_add(1);
  return absl::OkStatus();
}

}  // namespace framezip::testing
