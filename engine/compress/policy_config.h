// A compression policy and its options as one typed value (PolicyConfig): the form a policy keeps
// from the API's CompressionPolicy (proto/framezip/v1/video_chat.proto) or the CLI's
// `--policy NAME[:KEY=VALUE,...]` through the server to the engine's CreatePolicy, never turned
// into a string and parsed again on the way.
//
// Each option has one name, the same as the proto field, the CLI key and docs/api.md's, and one
// default, written here. The CLI form parses into this structure (ParsePolicyConfig); the canonical
// text (FormatPolicyConfig: the name and the options that differ from their defaults) is only for
// logs, stats and what a snapshot stores, and parses back to the same value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "engine/kv/low_rank_factor.h"

namespace framezip::engine::compress {

// How the rows outside the important set T are treated by sparse prefill (docs/methods.md §1.1 step
// 8, [UNCERTAIN] in the paper, hence several).
enum class URows : uint8_t {
  kSkip = 0,         // O[U] = 0: the residual stream passes unchanged, the MLP still runs
  kAttendImportant,  // Q[U] attends K[T], V[T] (and the past) causally by original position
  kLocal,            // Q[U] attends a sliding window of all tokens plus a few sink tokens
};

// "none": keeps everything; no options.
struct NoneOptions {
  bool operator==(const NoneOptions&) const = default;
};

// "zipvl" (zipvl.h).
struct ZipVlOptions {
  double tau = 0.975;          // attention-mass threshold of the adaptive important count, (0, 1]
  int64_t keep_recent = 64;    // the chunk's last tokens, always important
  int64_t probes_recent = 64;  // recent probe tokens (>= 1: the last token is always a probe)
  int64_t probes_random = 64;  // random probe tokens
  bool per_head = false;       // select T per KV head instead of one set per layer
  // What U rows do in sparse prefill: local (the default), skip or attend. On
  // framezip-tiny-video, skip cost 1.5 points of accuracy (KL 0.022 against dense), attend cost
  // most of the prefill saving (1.79x at 16k), local kept both (bench/RESULTS.md, "ZipVL U rows").
  URows u_rows = URows::kLocal;
  int64_t u_window = 64;  // local: recent keys each U row sees (its own included)
  int64_t u_sinks = 4;    // local: leading keys of the sequence each U row sees
  // Layers [0, dense_layers) attend densely in prefill; their tokens are still classified. On
  // the 2026-12-01 framezip-tiny-video (4 layers), 2 recovers full accuracy (91.0 % vs 89.2 %):
  // its running object facts form in layers 0-1 (bench/RESULTS.md). Off by default: on a
  // 4-layer model it makes half the prefill dense.
  int64_t dense_layers = 0;
  int high_bits = 4;  // bits of T: 4, 2 or 16 (the full-precision format, no quantization)
  int low_bits = 2;   // bits of U: 2, 4, 16, or 0 = evict U (ZipVL v2; the CLI also says "evict")
  int window = 100;   // decode tokens kept at full precision before they are classified
  uint64_t seed = 0;  // probe RNG
  bool operator==(const ZipVlOptions&) const = default;
};

// "attentionpack" (attentionpack.h).
struct AttentionPackOptions {
  // Ranks of the visual keys and values, of HD = G·d (64 for the shipped model: HD/8 and HD/4.
  // The rank sweep in bench/RESULTS.md chose them: this model's pre-RoPE visual keys lose nothing
  // down to rank 4, values need 8 or more; and a key rank is paid on every decode step).
  int rank_k = 8;
  int rank_v = 16;
  int groups = 2;              // 2: top_fraction at rank_v, the rest at rank_v/4; 1: all at rank_v
  double top_fraction = 0.25;  // the most attended fraction of values read at full rank
  double ema = 0.9;            // ω of the attention-importance EMA
  // Decode steps between regroupings of a block's values by importance (the EMA itself moves
  // every step). The reference code groups once per compression; every step cost a selection over
  // every block token per layer, a fifth of a decode step at 8k tokens.
  int regroup = 16;
  int dense_layers = 0;  // layers below it keep every token in pages
  int min_tokens = 32;   // smaller blocks stay in pages
  uint64_t seed = 0;
  kv::FactorFormat factors = kv::FactorFormat::kF16;  // f16 | int4 (kv/low_rank_factor.h)
  // T_p: once a layer holds this many full-precision tokens (text and generated ones), they
  // become one more low-rank block at rank_k / rank_v. 0 = never (the default: on the shipped
  // model's short conversations text is a small part of the cache, and the question's tokens are
  // the ones the next answer leans on hardest).
  int recompress = 0;
  bool operator==(const AttentionPackOptions&) const = default;
};

// "zipvl+attentionpack" (zipvl_attentionpack.h): every zipvl and attentionpack option; `seed`
// and `dense_layers` are one option each, shared (the zipvl fields hold them).
struct ZipVlAttentionPackOptions {
  ZipVlOptions zipvl;
  AttentionPackOptions pack;
  bool operator==(const ZipVlAttentionPackOptions&) const = default;
};

// "dynamic_llava" (dynamic_llava.h). An option left unset takes the value the model's
// predictors were trained for.
struct DynamicLlavaOptions {
  std::optional<int> sparse_layer;       // the selection layer (the predictors': 2)
  std::optional<double> vision_keep;     // kept fraction of each visual block, (0, 1] (0.2)
  bool random_select = false;            // select=random: uniform ranking, the baseline
  uint64_t seed = 0;                     // the random ranking's seed
  bool text_gate = true;                 // gate decode K/V writes by the text predictor
  double text_keep = 0;                  // 0 = the predictor decides; (0, 1] a forced keep rate
  std::optional<double> text_threshold;  // the text predictor's keep margin (the predictors')
  int bits = 16;                         // 16 | 4 | 2: kept tokens at full precision or quantised
  int window = 128;                      // the decode residual window with bits 4 or 2
  bool operator==(const DynamicLlavaOptions&) const = default;
};

// "fastv" (fastv.h).
struct FastVOptions {
  int k = 2;       // the first pruned layer, >= 1
  double r = 0.5;  // the pruned fraction of visual tokens, [0, 1]
  bool operator==(const FastVOptions&) const = default;
};

// "kivi" (kivi.h); "kivi4" is kivi with bits=4.
struct KiviOptions {
  int bits = 2;      // 2 or 4
  int window = 128;  // decode tokens kept at full precision, >= 1
  bool operator==(const KiviOptions&) const = default;
};

struct PolicyConfig {
  std::variant<NoneOptions, ZipVlOptions, AttentionPackOptions, ZipVlAttentionPackOptions,
               DynamicLlavaOptions, FastVOptions, KiviOptions>
      options;

  // "none", "zipvl", "attentionpack", "zipvl+attentionpack", "dynamic_llava", "fastv", "kivi"
  // (or "kivi4" for kivi at 4 bits).
  std::string_view name() const;
  bool operator==(const PolicyConfig&) const = default;
};

// The policy names ParsePolicyConfig knows.
std::vector<std::string> PolicyNames();

// The default options of policy `name`; INVALID_ARGUMENT listing the known names.
StatusOr<PolicyConfig> DefaultPolicyConfig(std::string_view name);

// "name" or "name:key=value,key=value" (spaces around keys and values are ignored; "" is none).
// INVALID_ARGUMENT naming the unknown policy, the unknown option (with the options it has), an
// option given twice, or the option whose value does not parse or lies outside its range.
StatusOr<PolicyConfig> ParsePolicyConfig(std::string_view spec);

// The name and, after a ':', the options that differ from their defaults, in a fixed order;
// ParsePolicyConfig reads it back to an equal config.
std::string FormatPolicyConfig(const PolicyConfig& config);

// INVALID_ARGUMENT naming the first option outside its range ("zipvl.tau: 1.5 is not in
// [1e-06, 1]"), `where` put before it (e.g. "policy." for a request's field).
Status ValidatePolicyConfig(const PolicyConfig& config, std::string_view where = "");

// The option names of policy `name` (empty for none, or an unknown name), in their fixed order.
std::vector<std::string> PolicyOptionNames(std::string_view name);

}  // namespace framezip::engine::compress
