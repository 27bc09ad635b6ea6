#include "engine/kv/position_runs.h"

#include <limits>

namespace framezip::engine::kv {

PositionRuns PositionRuns::From(std::span<const int32_t> positions) {
  PositionRuns p;
  for (const int32_t pos : positions) {
    if (!p.runs_.empty()) {
      Run& last = p.runs_.back();
      if (int64_t{last.start} + last.count == pos) {
        ++last.count;
        continue;
      }
    }
    p.runs_.push_back({pos, 1});
  }
  p.size_ = static_cast<int64_t>(positions.size());
  return p;
}

StatusOr<PositionRuns> PositionRuns::FromRuns(std::vector<Run> runs) {
  PositionRuns p;
  int64_t next_free = 0;
  for (const Run& r : runs) {
    const int64_t end = int64_t{r.start} + r.count;
    if (r.count < 1 || r.start < next_free || end - 1 > std::numeric_limits<int32_t>::max()) {
      return DataLossError("KV segment: position run [{}, +{}) after position {}", r.start,
                           r.count, next_free - 1);
    }
    next_free = end;
    p.size_ += r.count;
  }
  p.runs_ = std::move(runs);
  return p;
}

void PositionRuns::ExpandInto(std::vector<int32_t>& out) const {
  out.resize(static_cast<size_t>(size_));
  size_t at = 0;
  for (const Run& r : runs_) {
    for (int32_t i = 0; i < r.count; ++i) out[at++] = r.start + i;
  }
}

std::vector<int32_t> PositionRuns::Expand() const {
  std::vector<int32_t> out;
  ExpandInto(out);
  return out;
}

}  // namespace framezip::engine::kv
