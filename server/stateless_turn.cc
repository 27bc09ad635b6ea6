#include "server/stateless_turn.h"

#include <fstream>

#include "common/logging.h"
#include "media/content_hash.h"
#include "media/raw_frames.h"
#include "server/media_probe.h"

namespace framezip::server {

StatusOr<TurnRequest> PrepareStatelessTurn(ServiceCore& core, const v1::GenerateRequest& request,
                                           const std::vector<MediaInfo>& stored_media,
                                           const std::string& turn_id, const std::string& principal,
                                           std::vector<std::filesystem::path>* temp_files) {
  std::vector<std::string> stored_ids;
  for (const MediaInfo& m : stored_media) stored_ids.push_back(m.media_id);
  FZ_ASSIGN_OR_RETURN(GenerateInput input,
                      ValidateGenerate(request, core.options.validation, stored_ids));
  TurnRequest turn;
  turn.turn_id = turn_id;
  turn.principal = principal;
  turn.model = input.model;
  turn.policy = input.policy;
  turn.sampling = input.sampling;
  if (turn.sampling.max_tokens == 0) {
    turn.sampling.max_tokens = core.options.validation.default_max_tokens;
  }
  turn.messages = std::move(input.messages);
  const auto dir = core.options.media_dir / "_generate" / turn_id;
  const auto cannot_store = [&](const std::filesystem::path& path, const std::string& why) {
    FZ_LOG_ERROR("request {}: cannot write {}: {}", turn_id, path.string(), why);
    return InternalError("the server could not store the media (request id {})", turn_id);
  };
  std::error_code ec;
  if (!input.media.empty() || !stored_media.empty()) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return cannot_store(dir, ec.message());
  }
  for (size_t i = 0; i < input.media.size(); ++i) {
    const GenerateInput::Inline& m = input.media[i];
    const std::filesystem::path path = dir / (m.media_id + ".media");
    temp_files->push_back(path);
    // Decoded frames are stored as a raw-frames file (media/raw_frames.h): the layout header,
    // then the pixels. The content hash covers the file as stored, header included.
    const std::string header =
        m.raw_frames ? media::EncodeRawFramesHeader(*m.raw_frames) : std::string();
    media::ContentHasher hasher;
    hasher.Update(std::span(reinterpret_cast<const uint8_t*>(header.data()), header.size()));
    hasher.Update(std::span(reinterpret_cast<const uint8_t*>(m.data->data()), m.data->size()));
    // Bytes one of the principal's sessions holds already (a conversation resent in full):
    // linked, not written, probed and decoded again.
    const std::string hash = media::ToHex(hasher.Finish());
    if (std::optional<MediaInfo> held = core.FindHeldMedia(principal, hash, input.frames)) {
      std::filesystem::create_hard_link(held->path, path, ec);
      if (!ec) {
        held->media_id = m.media_id;
        held->name = m.name;
        held->path = path.string();
        turn.media.push_back(std::move(*held));
        continue;
      }
      ec.clear();  // its session went meanwhile: check the bytes as new
    }
    std::ofstream out(path, std::ios::binary);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(m.data->data(), static_cast<std::streamsize>(m.data->size()));
    out.close();
    if (!out) return cannot_store(path, "write failed");
    StatusOr<MediaInfo> info =
        ValidateMedia(*core.media_backend, path, m.mime_type, core.options.upload, input.frames,
                      core.engine->model().vision, core.options.validation.max_frames);
    if (!info.ok()) return Annotate(info.status(), fmt::format("media[{}] '{}'", i, m.media_id));
    info->media_id = m.media_id;
    info->name = m.name;
    info->path = path.string();
    turn.media.push_back(std::move(*info));
  }
  for (const MediaInfo& stored : stored_media) {
    MediaInfo m = stored;
    const std::filesystem::path path = dir / (m.media_id + ".media");
    temp_files->push_back(path);
    std::filesystem::create_hard_link(m.path, path, ec);
    if (ec) {
      ec.clear();
      std::filesystem::copy_file(m.path, path, ec);
      if (ec) {
        // The session was deleted (its files with it) since the media was looked up.
        return NotFoundError("media '{}': its session was deleted", m.media_id);
      }
    }
    m.path = path.string();
    turn.media.push_back(std::move(m));
  }
  return turn;
}

void RemoveTurnFiles(ServiceCore& core, std::vector<std::filesystem::path> files) {
  if (files.empty()) return;
  core.media_pool->Post([files = std::move(files)] {
    std::error_code ec;
    for (const auto& f : files) std::filesystem::remove(f, ec);
    std::filesystem::remove(files.front().parent_path(), ec);
  });
}

}  // namespace framezip::server
