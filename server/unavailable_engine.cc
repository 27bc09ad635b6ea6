#include "server/unavailable_engine.h"

namespace framezip::server {

UnavailableEngine::UnavailableEngine(std::string reason) : reason_(std::move(reason)) {
  model_.name = "none";
  model_.device = "none";
  model_.vision.tokens_per_video_frame = 0;
}

Status UnavailableEngine::Submit(TurnRequest, TurnCallbacks) {
  return UnavailableError("no model is loaded: {}", reason_);
}

}  // namespace framezip::server
