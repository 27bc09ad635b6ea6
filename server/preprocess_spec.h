// The media stage's preprocessing spec for a model: the engine's preprocessor_config.json (size,
// rescale, mean/std, resample) turned into media::PreprocessSpec. Lives in server/ because it is
// the one module that may see both engine and media (docs/architecture.md §2); the CLI uses it
// too.
#pragma once

#include <cstdint>

#include "engine/model/config.h"
#include "media/media.h"

namespace framezip::server {

// `image_size` (the vision tower's) is used when the preprocessor config gives no size.
media::PreprocessSpec PreprocessSpecFor(const engine::model::PreprocessorConfig& pre,
                                        int64_t image_size);

}  // namespace framezip::server
