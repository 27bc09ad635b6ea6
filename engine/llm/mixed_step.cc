// Decoder::MixedStep: one step of continuous batching over prefill chunks and decode tokens of
// many sequences, the dense work of each layer done once over all their rows (decoder.h).
#include <algorithm>
#include <cstring>

#include "engine/llm/decoder.h"

namespace framezip::engine::llm {

StatusOr<Tensor> Decoder::MixedStep(std::span<const StepInput> inputs) const {
  const size_t n = inputs.size();
  const int64_t hid = config_.hidden_size, vocab = config_.vocab_size;
  if (n == 0) return InvalidArgumentError("MixedStep: no inputs");
  // Row layout: the decode tokens first (contiguous, for the one paged decode attention), then
  // each prefill chunk.
  std::vector<Sequence*> decode;
  std::vector<int32_t> tokens;
  std::vector<int64_t> row_of(n);  // the row whose logits input i gets (its last row)
  int64_t rows = 0;
  for (size_t i = 0; i < n; ++i) {
    const StepInput& in = inputs[i];
    if (in.seq == nullptr) return InvalidArgumentError("MixedStep: input {} has no sequence", i);
    for (size_t j = 0; j < i; ++j) {
      if (inputs[j].seq == in.seq) return InvalidArgumentError("MixedStep: sequence {} repeats", i);
    }
    if (in.embeds.defined()) {
      const Tensor& e = in.embeds;
      if (e.rank() != 2 || e.dim(1) != hid || e.dtype() != DType::kF32 || e.dim(0) == 0) {
        return InvalidArgumentError("MixedStep: input {} has embeds {} ({}), want [T > 0, {}] f32",
                                    i, ShapeString(e.shape()), DTypeName(e.dtype()), hid);
      }
      if (!in.visual.empty() && static_cast<int64_t>(in.visual.size()) != e.dim(0)) {
        return InvalidArgumentError("MixedStep: input {} has a visual mask of {} for {} rows", i,
                                    in.visual.size(), e.dim(0));
      }
      continue;
    }
    row_of[i] = static_cast<int64_t>(decode.size());
    decode.push_back(in.seq);
    tokens.push_back(in.token);
  }
  rows = static_cast<int64_t>(decode.size());
  std::vector<PrefillPart> parts;
  for (size_t i = 0; i < n; ++i) {
    const StepInput& in = inputs[i];
    if (!in.embeds.defined()) continue;
    const int64_t t = in.embeds.dim(0);
    parts.push_back(PrefillPart{in.seq, rows, t, in.visual.empty() ? nullptr : in.visual.data()});
    rows += t;
    row_of[i] = rows - 1;
  }

  FZ_ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({rows, hid}, DType::kF32));
  FZ_ASSIGN_OR_RETURN(Tensor positions, Tensor::Empty({rows}, DType::kI32));
  int32_t* pos = positions.data<int32_t>();
  if (!decode.empty()) {
    // OUT_OF_RANGE for a token outside the vocabulary, before any sequence changes.
    FZ_ASSIGN_OR_RETURN(Tensor decode_x, x.Slice(0, static_cast<int64_t>(decode.size())));
    FZ_ASSIGN_OR_RETURN(Tensor ids,
                        Tensor::Empty({static_cast<int64_t>(tokens.size())}, DType::kI32));
    std::copy(tokens.begin(), tokens.end(), ids.data<int32_t>());
    FZ_RETURN_IF_ERROR(Embed(ids, decode_x));
    for (size_t i = 0; i < decode.size(); ++i) pos[i] = static_cast<int32_t>(decode[i]->length);
  }
  {
    size_t p = 0;
    for (const StepInput& in : inputs) {
      if (!in.embeds.defined()) continue;
      const PrefillPart& part = parts[p++];
      std::memcpy(x.data<float>() + part.row0 * hid, in.embeds.data<float>(), in.embeds.nbytes());
      for (int64_t r = 0; r < part.rows; ++r) {
        pos[part.row0 + r] = static_cast<int32_t>(in.seq->length + r);
      }
    }
  }
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    FZ_RETURN_IF_ERROR(RunLayer(static_cast<int>(l), decode, parts, positions, x));
  }
  for (Sequence* s : decode) ++s->length;
  for (const PrefillPart& part : parts) part.seq->length += part.rows;

  // lm_head only on the rows whose logits are returned, all in one pass.
  std::vector<size_t> wanted;
  for (size_t i = 0; i < n; ++i) {
    if (!inputs[i].embeds.defined() || inputs[i].logits) wanted.push_back(i);
  }
  FZ_ASSIGN_OR_RETURN(Tensor logits, Tensor::Zeros({static_cast<int64_t>(n), vocab}, DType::kF32));
  if (wanted.empty()) return logits;
  const int64_t m = static_cast<int64_t>(wanted.size());
  FZ_ASSIGN_OR_RETURN(Tensor picked, Tensor::Empty({m, hid}, DType::kF32));
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(picked.data<float>() + r * hid, x.data<float>() + row_of[wanted[r]] * hid,
                static_cast<size_t>(hid) * sizeof(float));
  }
  FZ_ASSIGN_OR_RETURN(Tensor picked_logits, Logits(picked));
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(logits.data<float>() + static_cast<int64_t>(wanted[r]) * vocab,
                picked_logits.data<float>() + r * vocab,
                static_cast<size_t>(vocab) * sizeof(float));
  }
  return logits;
}

}  // namespace framezip::engine::llm
