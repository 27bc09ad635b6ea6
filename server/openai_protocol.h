// The OpenAI chat-completions protocol, translated to and from framezip's own types: request
// bodies become a framezip.v1.GenerateRequest (then validated by the same rules as gRPC's
// Generate), and turns' text and stats become OpenAI's JSON objects. No I/O here: the HTTP
// transport (server/openai_http.h) calls these on the media pool, and the unit tests call them
// directly.
//
// Accepted request fields (anything else is ignored, as OpenAI's own API does):
//   model, messages (roles system | developer | user | assistant; content a string or a list of
//   parts {type: text | image_url | video_url}), temperature, top_p, top_k, seed, max_tokens /
//   max_completion_tokens, stop (string or list), n (1 only), stream,
//   stream_options.include_usage, presence_penalty / frequency_penalty (0 only), and a
//   "framezip" object: policy (a name such as "zipvl", or CompressionPolicy in protobuf's JSON
//   form), frames (FrameSampling in protobuf's JSON form), repetition_penalty, ignore_eos.
// Media URLs: "data:<video/*|image/*>;base64,<bytes>" (inline) or "framezip://media/<ID>" (media
// uploaded with gRPC's UploadMedia to one of the caller's sessions), or "file:///PATH" where an
// operator allowed a local directory. Every other scheme is refused: the server fetches nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "framezip/v1/video_chat.pb.h"
#include "server/turn_types.h"

namespace framezip::server {

struct OpenAiChatRequest {
  v1::GenerateRequest generate;               // model, sampling, policy, frames, media, messages
  std::vector<std::string> stored_media_ids;  // framezip://media/ID parts, in order
  // file:///PATH parts: generate.media(index) awaits the file's bytes, which the transport
  // reads only from the directory an operator allowed (--openai-local-media-dir), else refuses.
  struct LocalMedia {
    int index = 0;
    std::string path;   // absolute, as the client wrote it
    std::string field;  // the URL's field, for messages
  };
  std::vector<LocalMedia> local_media;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// INVALID_ARGUMENT naming the field ("messages[2].content[0].image_url.url: ..."), quoting client
// strings at most 64 bytes long.
StatusOr<OpenAiChatRequest> ParseChatCompletionRequest(std::string_view body);

// "stop" | "length" (a cancelled turn never reaches a client).
const char* OpenAiFinishReason(FinishReason reason);

// The non-streaming answer: a "chat.completion" object.
std::string ChatCompletionJson(const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const TurnStats& stats);
// One server-sent event ("data: {...}\n\n") of a "chat.completion.chunk": the assistant role and
// `text` (first chunk: role too), or the finish reason when `finish` is set.
std::string ChatChunkEvent(const std::string& id, int64_t created, const std::string& model,
                           const std::string* text, bool with_role, const FinishReason* finish);
// The usage chunk of stream_options.include_usage (choices empty).
std::string ChatUsageEvent(const std::string& id, int64_t created, const std::string& model,
                           const TurnStats& stats);

// OpenAI's error object: {"error": {"message", "type", "param", "code"}}.
std::string OpenAiErrorJson(const Status& status);
// The HTTP status of a failed request: 400 INVALID_ARGUMENT / FAILED_PRECONDITION / OUT_OF_RANGE,
// 401, 403, 404, 409 ALREADY_EXISTS, 429 RESOURCE_EXHAUSTED, 499 CANCELLED, 503 UNAVAILABLE,
// 504 DEADLINE_EXCEEDED, 500 otherwise.
int HttpStatusOf(const Status& status);

// GET /v1/models: the served model as a "list" of one "model".
std::string ModelListJson(const std::string& model, int64_t created);

}  // namespace framezip::server
