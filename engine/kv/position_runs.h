// PositionRuns: ascending token positions held as runs of consecutive values. A low-rank block's
// visual tokens sit at consecutive positions (a video's frames are one span of the prompt), so
// one run of 8 bytes replaces 4 bytes per token — at 4-bit factors the positions would otherwise
// be a fifth of what a block holds (docs/methods.md §2.4).
//
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace framezip::engine::kv {

class PositionRuns {
 public:
  struct Run {
    int32_t start = 0;
    int32_t count = 0;
    bool operator==(const Run&) const = default;
  };

  PositionRuns() = default;
  // Any ascending or not positions; each break in consecutiveness starts a new run.
  static PositionRuns From(std::span<const int32_t> positions);
  // From stored runs (the page codec): each count >= 1, start >= 0, no run past INT32_MAX, and
  // runs ascending without overlap; DATA_LOSS otherwise.
  static StatusOr<PositionRuns> FromRuns(std::vector<Run> runs);

  int64_t size() const { return size_; }
  size_t bytes() const { return runs_.size() * sizeof(Run); }
  const std::vector<Run>& runs() const { return runs_; }

  // Every position, in order, into `out` (resized).
  void ExpandInto(std::vector<int32_t>& out) const;
  std::vector<int32_t> Expand() const;

  bool operator==(const PositionRuns& other) const { return runs_ == other.runs_; }

 private:
  std::vector<Run> runs_;
  int64_t size_ = 0;
};

}  // namespace framezip::engine::kv
