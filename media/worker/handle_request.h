// What a media worker does with one request: runs it on the media stage (media/media.h) in its
// own process and builds the reply. Separate from the worker's process plumbing so the fuzzer
// drives exactly this code with hostile bytes (tests/fuzz/media_worker_fuzzer.cc).
#pragma once

#include <vector>

#include "media/worker/wire.h"

namespace framezip::media::worker {

// `media_fd`: the media, a readable regular file or memfd. For a decode that succeeds the
// response has has_frames set and the frames' shape, and `frames` holds the floats (moved out of
// the result, in a memfd for the caller to seal and hand over). Never throws: std::bad_alloc (the
// worker's memory limit) becomes RESOURCE_EXHAUSTED, any other exception INTERNAL.
WorkResponse HandleRequest(const WorkRequest& request, int media_fd, FrameData* frames);

}  // namespace framezip::media::worker
