// TEST DOUBLE. A deterministic ModelBackend for the server's tests, so the real scheduler, session
// store and gRPC layer are exercised without model weights. Never linked into framezip-server.
//
// Its "model":
//   - tokens are the bytes of the rendered conversation: a role marker token, the message's text
//     bytes, an end-of-turn token; a media part adds `visual_tokens` tokens derived from the
//     media's content hash; the prompt ends with an assistant marker;
//   - the answer to a prompt is  You said '<last user text>' (context <8 hex digits>).  where
//     the hex digits are a hash of every prompt token, so the answer depends on the whole history
//     (a server that loses or reorders a turn gets a different answer);
//   - one answer byte per decode step, then the end-of-turn token;
//   - KV costs `bytes_per_token` per token; a session keeps prompt + answer tokens after a turn,
//     and the next turn restores the longest common prefix with them.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/model_backend.h"

namespace framezip::testing {

struct FakeModelOptions {
  uint64_t kv_capacity_bytes = 64ull << 20;
  uint64_t bytes_per_token = 1024;
  uint32_t context_tokens = 8192;
  uint32_t default_max_tokens = 256;
  // Wall time of one engine step (a stand-in for compute), so tests can cancel mid-stream.
  std::chrono::microseconds step_delay{0};
};

class FakeModelBackend final : public server::ModelBackend {
 public:
  explicit FakeModelBackend(FakeModelOptions options = {});

  const server::ModelDescription& model() const override { return model_; }
  StatusOr<server::PreparedTurn> Prepare(const server::TurnRequest& request,
                                         server::KvReservations& kv) override;
  Status Step(std::span<server::StepItem> batch) override;
  Status Commit(const std::string& session_id, server::BackendSequence& sequence) override;
  std::vector<server::KvBytes> ReleaseSession(const std::string& session_id) override;
  std::vector<server::KvBytes> SessionKv(const std::string& session_id) const override;
  uint32_t SessionCachedTokens(const std::string& session_id) const override;
  uint64_t KvUsedBytes() const override { return used_bytes_.load(); }
  uint64_t KvCapacityBytes() const override { return options_.kv_capacity_bytes; }
  Status FlushSessions() override;

  // Test hooks.
  uint64_t largest_batch() const { return largest_batch_.load(); }
  int flushes() const { return flushes_.load(); }
  int live_sequences() const { return live_sequences_.load(); }

  // The answer the fake gives to a rendered prompt (exposed for tests of the fake itself).
  static std::string AnswerFor(const std::vector<uint32_t>& prompt, const std::string& last_user);

 private:
  class Sequence;
  std::vector<uint32_t> Render(const server::TurnRequest& request, std::string* last_user) const;

  const FakeModelOptions options_;
  server::ModelDescription model_;
  std::atomic<uint64_t> used_bytes_{0};
  std::atomic<uint64_t> largest_batch_{0};
  std::atomic<int> flushes_{0};
  std::atomic<int> live_sequences_{0};
  mutable std::mutex mu_;
  std::map<std::string, std::vector<uint32_t>> sessions_;  // tokens whose KV a session keeps
};

}  // namespace framezip::testing
