// Where `framezip eval` gets a synthvid split: from a directory when it is there, otherwise by
// running the deterministic generator tools/synthvid/synthvid.py (the split's own seed) once into
// a cache directory. Generation needs a Python with numpy, av (PyAV) and pillow
// (scripts/python-env.sh makes .venv/ with them).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "common/status.h"

namespace framezip::eval {

// Items a full split has (tools/synthvid/README.md): test and val 600, train 9000.
int SynthvidSplitSize(std::string_view split);

// $FRAMEZIP_CACHE_DIR, else $XDG_CACHE_HOME/framezip, else ~/.cache/framezip; plus "/synthvid".
std::filesystem::path DefaultSynthvidCacheDir();

// The directory holding <split>.jsonl to evaluate:
//  - `data_dir` when <data_dir>/<split>.jsonl exists (any length: a committed sample is fine);
//  - else `generate_dir` when it already holds at least `count` items of the split;
//  - else `generate_dir` after running synthvid.py --split <split> --count <count> into it
//    (mp4s already there are kept: generation resumes). Progress goes to stderr.
// FAILED_PRECONDITION, with the command that would make the data, when synthvid.py or a Python
// with its modules cannot be found; INTERNAL when the generator fails.
StatusOr<std::filesystem::path> FindOrGenerateSynthvidSplit(
    const std::filesystem::path& data_dir, std::string_view split, int count,
    const std::filesystem::path& generate_dir);

// The same for synthvid v2 (tools/synthvid/synthvid2.py; Debian's python3 with python3-numpy,
// python3-av and python3-pil suffices).
StatusOr<std::filesystem::path> FindOrGenerateSynthvid2Split(
    const std::filesystem::path& data_dir, std::string_view split, int count,
    const std::filesystem::path& generate_dir);

}  // namespace framezip::eval
