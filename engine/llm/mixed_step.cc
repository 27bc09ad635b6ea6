// Decoder's entry points (decoder.h): each lays out one step's rows — decode tokens first, then
// prefill chunks — and runs them through the one forward (Decoder::Forward), then computes lm_head
// only on the rows whose logits are returned.
#include <algorithm>
#include <memory>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/llm/decoder.h"
#include "engine/ops/embedding.h"
#include "engine/ops/rms_norm.h"
#include "engine/ops/row_slices.h"
#include "engine/ops/sample.h"

namespace framezip::engine::llm {
namespace {

Status CheckEmbeds(const Tensor& e, int64_t hidden, std::string_view what, size_t index) {
  if (e.rank() != 2 || e.dim(1) != hidden || e.dtype() != DType::kF32 || e.dim(0) == 0) {
    return InvalidArgumentError("{}: embeds[{}] has shape {} ({}), want [T > 0, {}] f32", what,
                                index, ShapeString(e.shape()), DTypeName(e.dtype()), hidden);
  }
  return absl::OkStatus();
}

// Rows [from, from + count) of a [*, width] f32 matrix into rows [to, ...) of another, each on
// its own device.
Status CopyRows(const Tensor& src, int64_t from, Tensor& dst, int64_t to, int64_t count) {
  const int64_t width = src.dim(1);
  return CopyBytes(dst.data<float>() + to * width, dst.device(), src.data<float>() + from * width,
                   src.device(), static_cast<size_t>(count * width) * sizeof(float));
}

}  // namespace

StatusOr<Tensor> Decoder::MixedStep(std::span<const StepInput> inputs,
                                    std::span<const ops::RowSampling> sampling,
                                    std::span<int32_t> sampled) const {
  const size_t n = inputs.size();
  const int64_t hid = shape_.hidden;
  if (n == 0) return InvalidArgumentError("MixedStep: no inputs");
  std::vector<Sequence*> decode;
  std::vector<int32_t> tokens;
  std::vector<int64_t> row_of(n);  // the row whose logits input i gets (its last row)
  for (size_t i = 0; i < n; ++i) {
    const StepInput& in = inputs[i];
    if (in.seq == nullptr) return InvalidArgumentError("MixedStep: input {} has no sequence", i);
    for (size_t j = 0; j < i; ++j) {
      if (inputs[j].seq == in.seq) return InvalidArgumentError("MixedStep: sequence {} repeats", i);
    }
    if (in.embeds.defined()) {
      FZ_RETURN_IF_ERROR(CheckEmbeds(in.embeds, hid, "MixedStep", i));
      if (!in.visual.empty() && static_cast<int64_t>(in.visual.size()) != in.embeds.dim(0)) {
        return InvalidArgumentError("MixedStep: input {} has a visual mask of {} for {} rows", i,
                                    in.visual.size(), in.embeds.dim(0));
      }
      continue;
    }
    row_of[i] = static_cast<int64_t>(decode.size());
    decode.push_back(in.seq);
    tokens.push_back(in.token);
  }
  // The step samples its decode rows (in input order: the order of their logits rows below).
  if (!sampling.empty() && sampling.size() != decode.size()) {
    return InvalidArgumentError("MixedStep: {} sampling rows for {} decode inputs", sampling.size(),
                                decode.size());
  }
  if (sampled.size() != sampling.size()) {
    return InvalidArgumentError(
        "MixedStep: {} decode inputs are sampled but {} token outputs given", sampling.size(),
        sampled.size());
  }
  int64_t rows = static_cast<int64_t>(decode.size());
  std::vector<PrefillPart> parts;
  for (size_t i = 0; i < n; ++i) {
    const StepInput& in = inputs[i];
    if (!in.embeds.defined()) continue;
    const int64_t t = in.embeds.dim(0);
    parts.push_back(PrefillPart{in.seq, rows, t, in.visual.empty() ? nullptr : in.visual.data()});
    rows += t;
    row_of[i] = rows - 1;
  }

  std::vector<int32_t> positions(static_cast<size_t>(rows));
  for (size_t i = 0; i < decode.size(); ++i) {
    positions[i] = static_cast<int32_t>(decode[i]->length);
  }
  for (const PrefillPart& part : parts) {
    for (int64_t r = 0; r < part.rows; ++r) {
      positions[static_cast<size_t>(part.row0 + r)] = static_cast<int32_t>(part.seq->length + r);
    }
  }
  // OUT_OF_RANGE for a token outside the vocabulary, checked on the host before any sequence
  // changes (so a planned step's ids go to the device once and never come back to be checked).
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= shape_.vocab) {
      return OutOfRangeError("Embedding: token id {} at index {} is outside the vocabulary [0, {})",
                             tokens[i], i, shape_.vocab);
    }
  }
  // A decode step planned ahead (step_plan.h): the step's pages reserved, every layer's slots and
  // attention descriptors, the positions and the ids in one upload.
  std::unique_ptr<DecodeStepPlan> plan;
  if (step_plans_ && kv_->CanPlanDecode(decode)) {
    plan = std::make_unique<DecodeStepPlan>();
    FZ_RETURN_IF_ERROR(kv_->Reserve(StepDemands(decode, parts), plan->reservation()));
    FZ_RETURN_IF_ERROR(kv_->PlanDecode(decode, positions, tokens, sampling, *plan));
  }

  FZ_ASSIGN_OR_RETURN(Tensor x, Empty({rows, hid}));
  if (!decode.empty()) {
    FZ_ASSIGN_OR_RETURN(Tensor decode_x, x.Slice(0, static_cast<int64_t>(decode.size())));
    if (plan != nullptr) {
      FZ_RETURN_IF_ERROR(ops::Embedding(weights_.embed_tokens, plan->token_ids(),
                                        plan->host_token_ids(), decode_x));
    } else {
      FZ_ASSIGN_OR_RETURN(Tensor ids,
                          Tensor::Empty({static_cast<int64_t>(tokens.size())}, DType::kI32));
      std::copy(tokens.begin(), tokens.end(), ids.data<int32_t>());
      FZ_RETURN_IF_ERROR(Embed(ids, decode_x));
    }
  }
  {
    size_t p = 0;
    for (const StepInput& in : inputs) {
      if (!in.embeds.defined()) continue;
      const PrefillPart& part = parts[p++];
      FZ_RETURN_IF_ERROR(CopyRows(in.embeds, 0, x, part.row0, part.rows));
    }
  }
  std::vector<int64_t> row_map;
  FZ_RETURN_IF_ERROR(Forward(StepRows{decode, parts, positions}, x, {}, &row_map, plan.get()));

  std::vector<size_t> wanted;
  std::vector<int64_t> wanted_rows;
  for (size_t i = 0; i < n; ++i) {
    if (!inputs[i].embeds.defined() || inputs[i].logits) {
      const int64_t row = row_map[static_cast<size_t>(row_of[i])];
      if (row < 0) {
        return FailedPreconditionError(
            "MixedStep: input {} needs logits, but policy {} removed its last row", i,
            inputs[i].seq->policy->name());
      }
      wanted.push_back(i);
      wanted_rows.push_back(row);
    }
  }
  Tensor logits;
  if (wanted.size() == n) {
    // Every input wants its logits (a decode step): LogitsOfRows gives them in input order.
    FZ_ASSIGN_OR_RETURN(logits, LogitsOfRows(x, wanted_rows));
  } else {
    FZ_ASSIGN_OR_RETURN(
        logits, Tensor::Zeros({static_cast<int64_t>(n), shape_.vocab}, DType::kF32, device_));
    if (!wanted.empty()) {
      FZ_ASSIGN_OR_RETURN(const Tensor picked, LogitsOfRows(x, wanted_rows));
      for (size_t r = 0; r < wanted.size(); ++r) {
        FZ_RETURN_IF_ERROR(
            CopyRows(picked, static_cast<int64_t>(r), logits, static_cast<int64_t>(wanted[r]), 1));
      }
    }
  }
  if (sampling.empty()) return logits;

  // The sampled rows in one call: one launch and the ids' read-back on a GPU, its parameters
  // already on the device when the step was planned.
  Tensor sampled_logits = logits;  // every input a decode row: rows 0..n-1 in order
  if (decode.size() != n) {        // prefill rows sit between: the decode rows, gathered
    const auto m = static_cast<int64_t>(decode.size());
    const int64_t vocab = shape_.vocab;
    std::vector<int32_t> from;
    for (size_t i = 0; i < n; ++i) {
      if (!inputs[i].embeds.defined()) from.push_back(static_cast<int32_t>(i));
    }
    FZ_ASSIGN_OR_RETURN(sampled_logits, Empty({m, vocab}));
    FZ_RETURN_IF_ERROR(ops::CopyRowSlices(
        device_, m, vocab, {.data = logits.data<float>(), .stride = vocab, .rows = from},
        {.data = sampled_logits.data<float>(), .stride = vocab}));
  }
  if (plan != nullptr) {
    FZ_RETURN_IF_ERROR(
        ops::SampleTokensPlanned(sampled_logits, sampling, plan->sampling(), sampled));
  } else {
    FZ_RETURN_IF_ERROR(ops::SampleTokens(sampled_logits, sampling, sampled));
  }
  return logits;
}

StatusOr<Tensor> Decoder::DecodeStep(std::span<Sequence* const> seqs,
                                     std::span<const int32_t> tokens) const {
  if (seqs.empty() || tokens.size() != seqs.size()) {
    return InvalidArgumentError("DecodeStep: {} sequences and {} tokens", seqs.size(),
                                tokens.size());
  }
  std::vector<StepInput> inputs(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    inputs[i].seq = seqs[i];
    inputs[i].token = tokens[i];
  }
  return MixedStep(inputs);
}

StatusOr<Tensor> Decoder::Prefill(Sequence& seq, const Tensor& embeds,
                                  const PrefillOptions& options) const {
  Sequence* const one[] = {&seq};
  FZ_ASSIGN_OR_RETURN(std::vector<Tensor> logits, PrefillBatch(one, {&embeds, 1}, {&options, 1}));
  return std::move(logits[0]);
}

StatusOr<std::vector<Tensor>> Decoder::PrefillBatch(std::span<Sequence* const> seqs,
                                                    std::span<const Tensor> embeds,
                                                    std::span<const PrefillOptions> options) const {
  const size_t n = seqs.size();
  const int64_t hid = shape_.hidden, vocab = shape_.vocab, layers = shape_.layers;
  if (n == 0 || embeds.size() != n || (!options.empty() && options.size() != n)) {
    return InvalidArgumentError("PrefillBatch: {} sequences, {} embeddings, {} options", n,
                                embeds.size(), options.size());
  }
  const PrefillOptions defaults;
  auto option = [&](size_t i) -> const PrefillOptions& {
    return options.empty() ? defaults : options[i];
  };
  std::vector<int64_t> total(n), chunk(n);
  for (size_t i = 0; i < n; ++i) {
    FZ_RETURN_IF_ERROR(CheckEmbeds(embeds[i], hid, "PrefillBatch", i));
    const PrefillOptions& o = option(i);
    total[i] = embeds[i].dim(0);
    if (!o.visual.empty() && static_cast<int64_t>(o.visual.size()) != total[i]) {
      return InvalidArgumentError("PrefillBatch: visual mask {} has {} entries for {} tokens", i,
                                  o.visual.size(), total[i]);
    }
    chunk[i] = o.chunk_tokens > 0 ? o.chunk_tokens : total[i];
    if ((o.all_logits || o.hidden_states != nullptr) && seqs[i]->policy->RowSelectionLayer() >= 0) {
      return FailedPreconditionError(
          "PrefillBatch: sequence {}'s policy {} removes rows, so per-row logits and hidden "
          "states do not exist for every input row",
          i, seqs[i]->policy->name());
    }
    for (size_t j = 0; j < i; ++j) {
      if (seqs[j] == seqs[i]) return InvalidArgumentError("PrefillBatch: sequence {} repeats", i);
    }
  }
  std::vector<Tensor> logits(n);
  for (size_t i = 0; i < n; ++i) {
    FZ_ASSIGN_OR_RETURN(logits[i], Empty({option(i).all_logits ? total[i] : 1, vocab}));
    if (std::vector<Tensor>* hs = option(i).hidden_states; hs != nullptr) {
      hs->clear();
      for (int64_t k = 0; k <= layers; ++k) {
        FZ_ASSIGN_OR_RETURN(Tensor h, Tensor::Empty({total[i], hid}, DType::kF32));
        hs->push_back(std::move(h));
      }
    }
  }
  // Round r feeds chunk r of every sequence that has one, as one concatenated [T, H] batch.
  struct Part {
    size_t seq = 0;  // index into seqs
    int64_t c0 = 0;  // the chunk's first token within its sequence's input
  };
  std::vector<PrefillPart> parts;
  std::vector<Part> part_of;
  std::vector<int32_t> positions;
  std::vector<int64_t> logit_rows;  // rows of x whose logits are wanted, in order
  for (int64_t round = 0;; ++round) {
    parts.clear();
    part_of.clear();
    int64_t rows = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t c0 = round * chunk[i];
      if (c0 >= total[i]) continue;
      const int64_t t = std::min(chunk[i], total[i] - c0);
      const PrefillOptions& o = option(i);
      const uint8_t* visual = o.visual.empty() ? nullptr : o.visual.data() + c0;
      parts.push_back(PrefillPart{seqs[i], rows, t, visual});
      part_of.push_back(Part{i, c0});
      rows += t;
    }
    if (parts.empty()) break;
    FZ_ASSIGN_OR_RETURN(Tensor x, Empty({rows, hid}));
    positions.assign(static_cast<size_t>(rows), 0);
    for (size_t p = 0; p < parts.size(); ++p) {
      const PrefillPart& part = parts[p];
      FZ_RETURN_IF_ERROR(CopyRows(embeds[part_of[p].seq], part_of[p].c0, x, part.row0, part.rows));
      for (int64_t r = 0; r < part.rows; ++r) {
        positions[static_cast<size_t>(part.row0 + r)] = static_cast<int32_t>(part.seq->length + r);
      }
    }
    // Hidden states (HF's output_hidden_states): each part's rows of x after each layer.
    auto record = [&](int64_t index, const Tensor& value) -> Status {
      for (size_t p = 0; p < parts.size(); ++p) {
        std::vector<Tensor>* hs = option(part_of[p].seq).hidden_states;
        if (hs == nullptr) continue;
        FZ_RETURN_IF_ERROR(CopyRows(value, parts[p].row0, (*hs)[static_cast<size_t>(index)],
                                    part_of[p].c0, parts[p].rows));
      }
      return absl::OkStatus();
    };
    const bool any_hidden = std::any_of(part_of.begin(), part_of.end(), [&](const Part& p) {
      return option(p.seq).hidden_states != nullptr;
    });
    if (any_hidden) FZ_RETURN_IF_ERROR(record(0, x));
    std::vector<int64_t> row_map;
    FZ_RETURN_IF_ERROR(Forward(StepRows{{}, parts, positions}, x,
                               any_hidden ? LayerObserver(record) : LayerObserver(), &row_map));
    if (any_hidden) {
      // The last entry is the final-normed output, as HF's.
      FZ_ASSIGN_OR_RETURN(Tensor normed, Empty({rows, hid}));
      FZ_RETURN_IF_ERROR(ops::RmsNorm(x, weights_.norm, shape_.rms_eps, normed));
      FZ_RETURN_IF_ERROR(record(layers, normed));
    }
    logit_rows.clear();
    for (size_t p = 0; p < parts.size(); ++p) {
      const PrefillPart& part = parts[p];
      if (option(part_of[p].seq).all_logits) {
        for (int64_t r = 0; r < part.rows; ++r) logit_rows.push_back(part.row0 + r);
      } else if (part_of[p].c0 + part.rows == total[part_of[p].seq]) {
        logit_rows.push_back(part.row0 + part.rows - 1);
      }
    }
    if (logit_rows.empty()) continue;
    for (int64_t& r : logit_rows) {
      r = row_map[static_cast<size_t>(r)];
      if (r < 0) {
        return FailedPreconditionError(
            "PrefillBatch: a sequence's policy removed the last row of its prompt, whose logits "
            "are needed");
      }
    }
    FZ_ASSIGN_OR_RETURN(const Tensor part_logits, LogitsOfRows(x, logit_rows));
    int64_t next = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      const size_t i = part_of[p].seq;
      int64_t count = 0, dest = 0;
      if (option(i).all_logits) {
        count = parts[p].rows;
        dest = part_of[p].c0;
      } else if (part_of[p].c0 + parts[p].rows == total[i]) {
        count = 1;
      }
      if (count == 0) continue;
      FZ_RETURN_IF_ERROR(CopyRows(part_logits, next, logits[i], dest, count));
      next += count;
    }
  }
  return logits;
}

}  // namespace framezip::engine::llm
