// Decoder::SelectRows: the policies' row selection at a layer's entry (compress/policy.h, "Row
// selection") and the removal of the dropped rows from the rest of the forward.
#include <chrono>
#include <vector>

#include "engine/llm/decoder.h"
#include "engine/ops/row_slices.h"

namespace framezip::engine::llm {
namespace {

// `t` where `policy` reads it: itself when the policy runs on t's device, else a host copy.
StatusOr<Tensor> ForPolicy(const compress::CompressionPolicy& policy, const Tensor& t) {
  if (policy.RunsOn(t.device())) return t;
  return t.To(Device::Cpu());
}

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

Status Decoder::SelectRows(int l, StepRows& rows, Tensor& x, Tensor& positions,
                           RemainingRows& remaining, std::vector<int64_t>& row_map) const {
  const auto selects_here = [l](const Sequence* s) { return s->policy->RowSelectionLayer() == l; };
  bool any = false;
  for (const Sequence* s : rows.decode) any = any || selects_here(s);
  for (const PrefillPart& p : rows.parts) any = any || selects_here(p.seq);
  if (!any) return absl::OkStatus();

  // Decode rows: the policy only decides; a decode row always stays (it attends to itself).
  for (size_t i = 0; i < rows.decode.size(); ++i) {
    Sequence& s = *rows.decode[i];
    if (!selects_here(&s)) continue;
    const int64_t r = static_cast<int64_t>(i);
    FZ_ASSIGN_OR_RETURN(const Tensor row, x.Slice(r, r + 1));
    FZ_ASSIGN_OR_RETURN(const Tensor seen, ForPolicy(*s.policy, row));
    FZ_RETURN_IF_ERROR(s.policy->OnDecodeHidden(seen, rows.host_positions[i]));
  }

  // Prefill chunks: each policy marks the rows that go on.
  std::vector<std::vector<uint8_t>> keep(rows.parts.size());
  bool removed = false;
  for (size_t p = 0; p < rows.parts.size(); ++p) {
    const PrefillPart& part = rows.parts[p];
    if (!selects_here(part.seq)) continue;
    const auto start = std::chrono::steady_clock::now();
    keep[p].assign(static_cast<size_t>(part.rows), 1);
    FZ_ASSIGN_OR_RETURN(const Tensor chunk, x.Slice(part.row0, part.row0 + part.rows));
    FZ_ASSIGN_OR_RETURN(const Tensor seen, ForPolicy(*part.seq->policy, chunk));
    FZ_RETURN_IF_ERROR(part.seq->policy->SelectPrefillRows(
        compress::HiddenRowsInputs{l, &seen, rows.host_positions.data() + part.row0, part.visual},
        keep[p]));
    if (keep[p].size() != static_cast<size_t>(part.rows)) {
      return InternalError("policy {}: {} row decisions for {} rows", part.seq->policy->name(),
                           keep[p].size(), part.rows);
    }
    for (const uint8_t k : keep[p]) removed = removed || k == 0;
    part.seq->prefill_stats.selection_ms += MillisecondsSince(start);
  }
  if (!removed) return absl::OkStatus();

  // The rows that go on, in order: every decode row, then each chunk's kept rows.
  RemainingRows next;
  std::vector<int32_t> gather;
  const size_t b = rows.decode.size();
  for (size_t i = 0; i < b; ++i) {
    gather.push_back(static_cast<int32_t>(i));
    next.host_positions.push_back(rows.host_positions[i]);
  }
  next.visual.resize(rows.parts.size());
  for (size_t p = 0; p < rows.parts.size(); ++p) {
    const PrefillPart& part = rows.parts[p];
    PrefillPart kept{part.seq, static_cast<int64_t>(gather.size()), 0, nullptr};
    for (int64_t r = 0; r < part.rows; ++r) {
      if (!keep[p].empty() && !keep[p][static_cast<size_t>(r)]) continue;
      const int64_t row = part.row0 + r;
      gather.push_back(static_cast<int32_t>(row));
      next.host_positions.push_back(rows.host_positions[static_cast<size_t>(row)]);
      if (part.visual != nullptr) next.visual[p].push_back(part.visual[r]);
      ++kept.rows;
    }
    next.parts.push_back(kept);
  }

  const int64_t t = static_cast<int64_t>(gather.size()), hid = shape_.hidden;
  FZ_ASSIGN_OR_RETURN(Tensor compact, Empty({t, hid}));
  FZ_RETURN_IF_ERROR(ops::CopyRowSlices(device_, t, hid,
                                        {.data = x.data<float>(), .stride = hid, .rows = gather},
                                        {.data = compact.data<float>(), .stride = hid}));
  std::vector<int64_t> new_index(static_cast<size_t>(x.dim(0)), -1);
  for (int64_t i = 0; i < t; ++i) new_index[static_cast<size_t>(gather[i])] = i;
  for (int64_t& m : row_map) {
    if (m >= 0) m = new_index[static_cast<size_t>(m)];
  }
  x = std::move(compact);

  FZ_ASSIGN_OR_RETURN(Tensor host_positions, Tensor::Empty({t}, DType::kI32));
  std::copy(next.host_positions.begin(), next.host_positions.end(), host_positions.data<int32_t>());
  positions = host_positions;
  if (!device_.is_cpu()) {
    FZ_ASSIGN_OR_RETURN(positions, host_positions.To(device_));
  }

  // The StepRows now point into `remaining` (moving the vectors keeps their buffers).
  remaining = std::move(next);
  for (size_t p = 0; p < remaining.parts.size(); ++p) {
    if (rows.parts[p].visual != nullptr) remaining.parts[p].visual = remaining.visual[p].data();
  }
  rows = StepRows{rows.decode, remaining.parts, remaining.host_positions};
  return absl::OkStatus();
}

}  // namespace framezip::engine::llm
