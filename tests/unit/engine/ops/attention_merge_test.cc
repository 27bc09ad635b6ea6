// MergeAttentionParts and AttentionTokenShares on every device present (device_cases.h) against
// f64 attention over the whole row: the keys of each head are split into a base share (given
// normalised with its log-sum-exp, as PagedDecodeAttention gives it) and parts (given as
// unnormalised max, sum and output, as LowRankBlockAttend gives them), each computed in f64 and
// rounded to f32; the merge must give the softmax over all keys, and the token shares each
// part's tokens' head-averaged probabilities in it. Cases: no parts; several parts with an empty
// one; an empty base; a head where nothing has weight; the output written over the base.
// Inputs are f32 roundings of f64 values, and the merge does O(P) f32 exps and sums: 1e-5 abs +
// 1e-5 rel on outputs of order 1 and probabilities below 1.
#include "engine/ops/attention_merge.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

constexpr testing::Tolerance kMerge{1e-5, 1e-5};

struct MergeCase {
  const char* name;
  int64_t heads, d;
  int64_t base_tokens;
  std::vector<int64_t> part_tokens;  // 0: an empty part (max −inf, sum 0)
  bool in_place = false;
};

// Scores s[h][t] over all tokens (base first, then each part's), values v[t][h][c].
struct Row {
  std::vector<std::vector<double>> scores;  // [H][T]
  std::vector<double> values;               // [T, H, d]
};

struct Inputs {
  Tensor base, base_lse, part_max, part_sum, part_out;
  std::vector<Tensor> part_weights;             // [H, T_p] each
  std::vector<double> want_out;                 // [H, d]
  std::vector<std::vector<double>> want_probs;  // per part [T_p]
};

Inputs Build(const MergeCase& c, std::mt19937_64& rng, bool silent_head) {
  const int64_t H = c.heads, d = c.d, P = static_cast<int64_t>(c.part_tokens.size());
  int64_t total = c.base_tokens;
  for (int64_t t : c.part_tokens) total += t;
  std::normal_distribution<double> normal(0.0, 1.0);
  Row row;
  row.scores.assign(static_cast<size_t>(H), std::vector<double>(static_cast<size_t>(total)));
  for (auto& s : row.scores) {
    for (double& x : s) x = 3.0 * normal(rng);  // spread enough that maxima matter
  }
  row.values.resize(static_cast<size_t>(total * H * d));
  for (double& x : row.values) x = normal(rng);
  const auto value = [&](int64_t t, int64_t h, int64_t e) {
    return row.values[static_cast<size_t>((t * H + h) * d + e)];
  };

  Inputs in;
  in.base = MakeEmpty({H, d});
  in.base_lse = MakeEmpty({H});
  in.part_max = MakeEmpty({P, H});
  in.part_sum = MakeEmpty({P, H});
  in.part_out = MakeEmpty({P, H, d});
  in.want_out.assign(static_cast<size_t>(H * d), 0.0);
  in.want_probs.assign(static_cast<size_t>(P), {});
  std::vector<int64_t> first(static_cast<size_t>(P) + 1, c.base_tokens);
  for (int64_t p = 0; p < P; ++p) first[p + 1] = first[p] + c.part_tokens[p];
  for (int64_t p = 0; p < P; ++p) {
    in.part_weights.push_back(MakeEmpty({H, c.part_tokens[p]}));
    in.want_probs[p].assign(static_cast<size_t>(c.part_tokens[p]), 0.0);
  }
  for (int64_t h = 0; h < H; ++h) {
    // A silent head (the last one, when asked): no token of it has weight anywhere.
    const bool silent = silent_head && h == H - 1;
    const std::vector<double>& s = row.scores[h];
    // The whole row's softmax, the reference.
    double mx = -INFINITY, sum = 0;
    if (!silent) {
      for (double x : s) mx = std::max(mx, x);
      for (double x : s) sum += std::exp(x - mx);
      for (int64_t t = 0; t < total; ++t) {
        const double p = std::exp(s[t] - mx) / sum;
        for (int64_t e = 0; e < d; ++e) in.want_out[h * d + e] += p * value(t, h, e);
      }
    }
    // The base share, normalised, with its lse.
    double bmax = -INFINITY, bsum = 0;
    if (!silent) {
      for (int64_t t = 0; t < c.base_tokens; ++t) bmax = std::max(bmax, s[t]);
      for (int64_t t = 0; t < c.base_tokens; ++t) bsum += std::exp(s[t] - bmax);
    }
    for (int64_t e = 0; e < d; ++e) {
      double acc = 0;
      for (int64_t t = 0; t < c.base_tokens && bsum > 0; ++t) {
        acc += std::exp(s[t] - bmax) / bsum * value(t, h, e);
      }
      in.base.data<float>()[h * d + e] = static_cast<float>(acc);
    }
    in.base_lse.data<float>()[h] = bsum > 0 ? static_cast<float>(bmax + std::log(bsum)) : -INFINITY;
    // Each part: max, sum, unnormalised output and weights; and its tokens' probabilities.
    for (int64_t p = 0; p < P; ++p) {
      double pmax = -INFINITY, psum = 0;
      if (!silent) {
        for (int64_t t = first[p]; t < first[p + 1]; ++t) pmax = std::max(pmax, s[t]);
        for (int64_t t = first[p]; t < first[p + 1]; ++t) psum += std::exp(s[t] - pmax);
      }
      in.part_max.data<float>()[p * H + h] = static_cast<float>(pmax);
      in.part_sum.data<float>()[p * H + h] = static_cast<float>(psum);
      const int64_t n = c.part_tokens[p];
      for (int64_t t = 0; t < n; ++t) {
        const double w = silent ? 0.0 : std::exp(s[first[p] + t] - pmax);
        in.part_weights[p].data<float>()[h * n + t] = static_cast<float>(w);
        if (!silent) in.want_probs[p][t] += std::exp(s[first[p] + t] - mx) / sum / H;
      }
      for (int64_t e = 0; e < d; ++e) {
        double acc = 0;
        for (int64_t t = first[p]; t < first[p + 1] && !silent; ++t) {
          acc += std::exp(s[t] - pmax) * value(t, h, e);
        }
        in.part_out.data<float>()[(p * H + h) * d + e] = static_cast<float>(acc);
      }
    }
  }
  return in;
}

std::vector<MergeCase> Cases() {
  return {
      {"no parts", 4, 64, 9, {}},
      {"three parts, one empty", 14, 64, 37, {120, 0, 5}},
      {"empty base", 8, 128, 0, {33, 64}},
      {"in place", 2, 32, 3, {300}, true},
  };
}

TEST_CASE("Merged attention parts equal the softmax over all keys on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  for (const MergeCase& c : Cases()) {
    for (const bool silent : {false, true}) {
      DYNAMIC_SECTION(c.name << (silent ? ", a silent head" : "")) {
        const Inputs in = Build(c, rng, silent);
        const int64_t H = c.heads, d = c.d;
        ForEachDevice([&](const Device& device) {
          const Tensor base = On(in.base, device);
          Tensor out = c.in_place ? base : PoisonedOn({H, d}, device);
          Tensor total_max = PoisonedOn({H}, device), total_sum = PoisonedOn({H}, device);
          const Status st = ops::MergeAttentionParts(
              base, On(in.base_lse, device), On(in.part_max, device), On(in.part_sum, device),
              On(in.part_out, device), out, total_max, total_sum);
          INFO(st.ToString());
          REQUIRE(st.ok());
          CheckCloseTo(out, in.want_out, kMerge);
          const Tensor sums = total_sum.To(Device::Cpu()).value();
          if (silent) CHECK(sums.data<float>()[H - 1] == 0.f);
          for (size_t p = 0; p < c.part_tokens.size(); ++p) {
            const int64_t n = c.part_tokens[p];
            const Tensor part_max = On(in.part_max, device).Slice(p, p + 1)->Reshape({H}).value();
            Tensor probs = PoisonedOn({n}, device);
            const Status shares = ops::AttentionTokenShares(On(in.part_weights[p], device),
                                                            part_max, total_max, total_sum, probs);
            INFO("part " << p << ": " << shares.ToString());
            REQUIRE(shares.ok());
            CheckCloseTo(probs, in.want_probs[p], kMerge);
          }
        });
      }
    }
  }
}

TEST_CASE("Attention merge refuses tensors of the wrong shape, naming them",
          "[unit][engine][ops]") {
  Tensor base = MakeEmpty({4, 8}), lse = MakeEmpty({4}), max = MakeEmpty({2, 4}),
         sum = MakeEmpty({2, 4}), part_out = MakeEmpty({2, 4, 8}), out = MakeEmpty({4, 8}),
         total_max = MakeEmpty({4}), total_sum = MakeEmpty({4});
  Tensor bad_sum = MakeEmpty({2, 5});
  Status st =
      ops::MergeAttentionParts(base, lse, max, bad_sum, part_out, out, total_max, total_sum);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("part_sum"));
  Tensor bad_out = MakeEmpty({4, 9});
  st = ops::MergeAttentionParts(base, lse, max, sum, part_out, bad_out, total_max, total_sum);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("out"));
  // Shares whose maxima are not a [P, H] matrix, and a base with no channel dimension.
  Tensor flat_max = MakeEmpty({8});
  st = ops::MergeAttentionParts(base, lse, flat_max, sum, part_out, out, total_max, total_sum);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("part_max"));
  Tensor flat_base = MakeEmpty({32});
  st = ops::MergeAttentionParts(flat_base, lse, max, sum, part_out, out, total_max, total_sum);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("base"));
  Tensor weights = MakeEmpty({4, 6}), probs = MakeEmpty({5});
  st = ops::AttentionTokenShares(weights, lse, total_max, total_sum, probs);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("probs"));
}

}  // namespace
}  // namespace framezip::engine::test
