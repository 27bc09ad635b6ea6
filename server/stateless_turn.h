// What every stateless request shares, whichever protocol carried it (gRPC Generate, the
// OpenAI-compatible API's chat completions): the request is validated by the same rules, its
// inline media are written to the media directory and checked with the same limits, and the
// result is one TurnRequest for the engine, so admission, scheduling and limits are those of
// every other turn.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "framezip/v1/video_chat.pb.h"
#include "server/service_core.h"

namespace framezip::server {

// Builds the turn of a stateless request. `stored_media`: media the server already holds
// (UploadMedia'd to one of the principal's sessions) that the messages name by media_id; each is
// linked into the turn's own directory, so deleting the session meanwhile cannot pull the file
// from under the turn. Every file made is appended to `*temp_files` (also on error) for
// RemoveTurnFiles once the turn ends. Errors: those of ValidateGenerate and ValidateMedia, named
// after the field ("media[1] 'clip': ..."); INTERNAL when the media directory cannot be written.
// Opens media containers: call it on the media pool, never in a reaction or on an I/O thread.
StatusOr<TurnRequest> PrepareStatelessTurn(ServiceCore& core, const v1::GenerateRequest& request,
                                           const std::vector<MediaInfo>& stored_media,
                                           const std::string& turn_id, const std::string& principal,
                                           std::vector<std::filesystem::path>* temp_files);

// Removes a stateless turn's files and their directory, on the media pool.
void RemoveTurnFiles(ServiceCore& core, std::vector<std::filesystem::path> files);

}  // namespace framezip::server
