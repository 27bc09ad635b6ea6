// A TurnEngine with no model behind it: sessions and uploads work, every turn is refused with
// UNAVAILABLE and the reason. framezip-server runs it when started without --model, so the
// process still serves health, sessions and metrics (and says clearly why it cannot chat).
#pragma once

#include <string>

#include "server/turn_engine.h"

namespace framezip::server {

class UnavailableEngine final : public TurnEngine {
 public:
  explicit UnavailableEngine(std::string reason);

  const ModelDescription& model() const override { return model_; }
  Status Submit(TurnRequest request, TurnCallbacks callbacks) override;
  void Cancel(const std::string&, Status) override {}
  std::vector<KvBytes> ReleaseSession(const std::string&) override { return {}; }
  std::vector<KvBytes> SessionKv(const std::string&) const override { return {}; }
  uint32_t SessionCachedTokens(const std::string&) const override { return 0; }
  EngineLoad Load() const override { return {}; }
  void Drain(Clock::time_point) override {}

 private:
  std::string reason_;
  ModelDescription model_;
};

}  // namespace framezip::server
